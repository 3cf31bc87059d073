import Foundation

/// An APNs payload: the `aps` dictionary and the app's own keys beside it, what `push.enqueue(payload => …)` takes.
///
/// Every field is optional and left out of the JSON when unset, so the same type also writes a locale
/// variant's partial payload (``LocalizedVariant``): `APNsPayload(alert: .init(body: "2-1 à la 89e"))` overrides
/// only the alert's body. The database checks the result (size, `aps`, push type); nothing is checked here.
public struct APNsPayload: Sendable, Hashable, Encodable {
    /// `aps.alert`: a plain string (`"alert": "Shipped"`) or a dictionary with a title, subtitle and body.
    public var alert: Alert?
    /// `aps.badge`: the number on the app icon (0 clears it). For each device's own counter, use
    /// ``EnqueueRequest/badge`` (`.increment`) instead.
    public var badge: Int?
    /// `aps.sound`: a sound file's name, `"default"`, or a critical alert's sound.
    public var sound: Sound?
    /// `aps.thread-id`: groups notifications.
    public var threadID: String?
    /// `aps.category`: the notification category with its actions.
    public var category: String?
    /// `aps.content-available: 1`: a background update (with ``PushType/background`` and no alert, a silent push).
    public var contentAvailable: Bool
    /// `aps.mutable-content: 1`: the app's notification service extension may change the notification.
    public var mutableContent: Bool
    /// `aps.target-content-id`: the window to bring forward.
    public var targetContentID: String?
    /// `aps.interruption-level`: `passive`, `active`, `time-sensitive` or `critical`.
    public var interruptionLevel: InterruptionLevel?
    /// `aps.relevance-score`: 0 to 1, how the summary sorts it.
    public var relevanceScore: Double?
    /// The app's own keys, beside `aps` (an `"aps"` key here is ignored: `aps` is the fields above). An app with
    /// FCM and no explicit Android message gets them as its FCM `data`.
    public var custom: [String: JSONValue]

    public init(
        alert: Alert? = nil, badge: Int? = nil, sound: Sound? = nil, threadID: String? = nil, category: String? = nil,
        contentAvailable: Bool = false, mutableContent: Bool = false, targetContentID: String? = nil,
        interruptionLevel: InterruptionLevel? = nil, relevanceScore: Double? = nil, custom: [String: JSONValue] = [:]
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.threadID = threadID
        self.category = category
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.targetContentID = targetContentID
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.custom = custom
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: AnyKey.self)
        for (key, value) in custom where key != "aps" {
            try container.encode(value, forKey: AnyKey(key))
        }
        var aps = container.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("aps"))
        try aps.encodeIfPresent(alert, forKey: AnyKey("alert"))
        try aps.encodeIfPresent(badge, forKey: AnyKey("badge"))
        try aps.encodeIfPresent(sound, forKey: AnyKey("sound"))
        try aps.encodeIfPresent(threadID, forKey: AnyKey("thread-id"))
        try aps.encodeIfPresent(category, forKey: AnyKey("category"))
        if contentAvailable { try aps.encode(1, forKey: AnyKey("content-available")) }
        if mutableContent { try aps.encode(1, forKey: AnyKey("mutable-content")) }
        try aps.encodeIfPresent(targetContentID, forKey: AnyKey("target-content-id"))
        try aps.encodeIfPresent(interruptionLevel?.rawValue, forKey: AnyKey("interruption-level"))
        try aps.encodeIfPresent(relevanceScore, forKey: AnyKey("relevance-score"))
    }

    /// `aps.alert`: a string, or a dictionary. `alert: "Shipped"` is the string form;
    /// `alert: .init(title: "Goal!", body: "2-1")` the dictionary.
    public enum Alert: Sendable, Hashable, Encodable, ExpressibleByStringLiteral {
        case text(String)
        case content(Content)

        /// The dictionary form, with the fields given.
        public init(
            title: String? = nil, subtitle: String? = nil, body: String? = nil, launchImage: String? = nil,
            titleLocKey: String? = nil, titleLocArgs: [String]? = nil, subtitleLocKey: String? = nil,
            subtitleLocArgs: [String]? = nil, locKey: String? = nil, locArgs: [String]? = nil
        ) {
            self = .content(Content(
                title: title, subtitle: subtitle, body: body, launchImage: launchImage, titleLocKey: titleLocKey,
                titleLocArgs: titleLocArgs, subtitleLocKey: subtitleLocKey, subtitleLocArgs: subtitleLocArgs,
                locKey: locKey, locArgs: locArgs))
        }

        public init(stringLiteral value: String) { self = .text(value) }

        public func encode(to encoder: any Encoder) throws {
            switch self {
            case .text(let text):
                var container = encoder.singleValueContainer()
                try container.encode(text)
            case .content(let content):
                try content.encode(to: encoder)
            }
        }

        /// The dictionary form of `aps.alert`.
        public struct Content: Sendable, Hashable, Encodable {
            public var title: String?
            public var subtitle: String?
            public var body: String?
            public var launchImage: String?
            public var titleLocKey: String?
            public var titleLocArgs: [String]?
            public var subtitleLocKey: String?
            public var subtitleLocArgs: [String]?
            public var locKey: String?
            public var locArgs: [String]?

            enum CodingKeys: String, CodingKey {
                case title, subtitle, body
                case launchImage = "launch-image"
                case titleLocKey = "title-loc-key"
                case titleLocArgs = "title-loc-args"
                case subtitleLocKey = "subtitle-loc-key"
                case subtitleLocArgs = "subtitle-loc-args"
                case locKey = "loc-key"
                case locArgs = "loc-args"
            }
        }
    }

    /// `aps.sound`: a file name (`"default"` is the system's), or a critical alert's dictionary.
    public enum Sound: Sendable, Hashable, Encodable, ExpressibleByStringLiteral {
        case named(String)
        /// `{"critical": 1, "name": …, "volume": …}`: plays even when muted (needs Apple's entitlement).
        case critical(name: String, volume: Double)

        public static let `default` = Sound.named("default")

        public init(stringLiteral value: String) { self = .named(value) }

        public func encode(to encoder: any Encoder) throws {
            switch self {
            case .named(let name):
                var container = encoder.singleValueContainer()
                try container.encode(name)
            case .critical(let name, let volume):
                var container = encoder.container(keyedBy: AnyKey.self)
                try container.encode(1, forKey: AnyKey("critical"))
                try container.encode(name, forKey: AnyKey("name"))
                try container.encode(volume, forKey: AnyKey("volume"))
            }
        }
    }

    /// `aps.interruption-level`.
    public enum InterruptionLevel: String, Sendable, Hashable {
        case passive
        case active
        case timeSensitive = "time-sensitive"
        case critical
    }
}
