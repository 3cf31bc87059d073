import Foundation

/// The payload of a Live Activity push (push type `liveactivity`): start an activity on push-to-start tokens,
/// update or end running ones (by ``Audience/activityIDs(_:)``, or a channel).
///
/// Dates are written as UNIX seconds, as APNs wants them. The database refuses what APNs would (a missing
/// `content-state` on an update, a start without `alert`, `attributes-type` and `attributes`, …) and names the
/// field; nothing is checked here.
///
/// ```swift
/// let update = LiveActivityPayload.update(contentState: ["score": "2-1"])
/// let start = LiveActivityPayload.start(
///     attributesType: "MatchAttributes", attributes: ["match": "77"], contentState: ["score": "0-0"],
///     alert: .init(title: "Kick-off", body: "The match has started"))
/// ```
public struct LiveActivityPayload: Sendable, Hashable, Encodable {
    public enum Event: String, Sendable, Hashable {
        case start, update, end
    }

    /// `aps.event`.
    public var event: Event
    /// `aps.timestamp`: when this state was made; the device keeps the newest.
    public var timestamp: Date
    /// `aps.content-state`: the activity's dynamic state (required to update or end). ``JSONValue/init(encoding:)``
    /// makes it from the app's own `ContentState`.
    public var contentState: JSONValue?
    /// `aps.attributes-type`: the `ActivityAttributes` type's name (to start).
    public var attributesType: String?
    /// `aps.attributes`: the activity's static attributes (to start).
    public var attributes: JSONValue?
    /// `aps.alert`: required to start, optional otherwise.
    public var alert: Alert?
    /// `aps.dismissal-date`: with `end`, when the activity leaves the Lock Screen (a past date: at once).
    public var dismissalDate: Date?
    /// `aps.stale-date`: when the state is out of date.
    public var staleDate: Date?
    /// `aps.relevance-score`: orders the app's activities.
    public var relevanceScore: Double?
    /// `aps.input-push-token: 1` (iOS 18, start): the started activity gets its own update token.
    public var inputPushToken: Bool
    /// `aps.input-push-channel` (iOS 18, start): the started activity subscribes to that channel id.
    public var inputPushChannel: String?
    /// Keys beside `aps` (an `"aps"` key here is ignored).
    public var custom: [String: JSONValue]

    public init(
        event: Event, timestamp: Date = Date(), contentState: JSONValue? = nil, attributesType: String? = nil,
        attributes: JSONValue? = nil, alert: Alert? = nil, dismissalDate: Date? = nil, staleDate: Date? = nil,
        relevanceScore: Double? = nil, inputPushToken: Bool = false, inputPushChannel: String? = nil,
        custom: [String: JSONValue] = [:]
    ) {
        self.event = event
        self.timestamp = timestamp
        self.contentState = contentState
        self.attributesType = attributesType
        self.attributes = attributes
        self.alert = alert
        self.dismissalDate = dismissalDate
        self.staleDate = staleDate
        self.relevanceScore = relevanceScore
        self.inputPushToken = inputPushToken
        self.inputPushChannel = inputPushChannel
        self.custom = custom
    }

    /// Starts an activity on push-to-start tokens (enqueue it with ``EnqueueRequest/activityType`` set to
    /// `attributesType`).
    public static func start(
        attributesType: String, attributes: JSONValue, contentState: JSONValue, alert: Alert,
        timestamp: Date = Date(), staleDate: Date? = nil, relevanceScore: Double? = nil,
        inputPushToken: Bool = false, inputPushChannel: String? = nil
    ) -> LiveActivityPayload {
        LiveActivityPayload(
            event: .start, timestamp: timestamp, contentState: contentState, attributesType: attributesType,
            attributes: attributes, alert: alert, staleDate: staleDate, relevanceScore: relevanceScore,
            inputPushToken: inputPushToken, inputPushChannel: inputPushChannel)
    }

    /// Updates running activities.
    public static func update(
        contentState: JSONValue, timestamp: Date = Date(), alert: Alert? = nil, staleDate: Date? = nil,
        relevanceScore: Double? = nil
    ) -> LiveActivityPayload {
        LiveActivityPayload(
            event: .update, timestamp: timestamp, contentState: contentState, alert: alert, staleDate: staleDate,
            relevanceScore: relevanceScore)
    }

    /// Ends running activities, with their final state.
    public static func end(
        contentState: JSONValue, timestamp: Date = Date(), dismissalDate: Date? = nil, alert: Alert? = nil
    ) -> LiveActivityPayload {
        LiveActivityPayload(
            event: .end, timestamp: timestamp, contentState: contentState, alert: alert, dismissalDate: dismissalDate)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        for (key, value) in custom where key != "aps" {
            try container.encode(value, forKey: AnyKey(key))
        }
        var aps = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("aps"))
        try aps.encode(Self.seconds(timestamp), forKey: AnyKey("timestamp"))
        try aps.encode(event.rawValue, forKey: AnyKey("event"))
        try aps.encodeIfPresent(contentState, forKey: AnyKey("content-state"))
        try aps.encodeIfPresent(attributesType, forKey: AnyKey("attributes-type"))
        try aps.encodeIfPresent(attributes, forKey: AnyKey("attributes"))
        try aps.encodeIfPresent(alert, forKey: AnyKey("alert"))
        try aps.encodeIfPresent(dismissalDate.map(Self.seconds), forKey: AnyKey("dismissal-date"))
        try aps.encodeIfPresent(staleDate.map(Self.seconds), forKey: AnyKey("stale-date"))
        try aps.encodeIfPresent(relevanceScore, forKey: AnyKey("relevance-score"))
        if inputPushToken { try aps.encode(1, forKey: AnyKey("input-push-token")) }
        try aps.encodeIfPresent(inputPushChannel, forKey: AnyKey("input-push-channel"))
    }

    /// UNIX seconds, whole: what APNs takes for each of the activity's dates.
    static func seconds(_ date: Date) -> Int64 {
        Int64(date.timeIntervalSince1970.rounded(.down))
    }

    /// A Live Activity's `aps.alert`: title, body, and the sound to play with it.
    public struct Alert: Sendable, Hashable, Encodable {
        public var title: String?
        public var body: String?
        public var sound: String?

        public init(title: String? = nil, body: String? = nil, sound: String? = nil) {
            self.title = title
            self.body = body
            self.sound = sound
        }
    }
}
