import Foundation

/// One call of `push.enqueue`: a broadcast, or a transactional push to some users or tokens.
///
/// Each field is a named parameter of `push.enqueue` (README, "SQL API"), bound as a value. Unset fields take the
/// function's defaults. The database validates the whole request in the same statement and names the field in
/// its error (``PGPushClientError/field``); a refused request leaves nothing behind.
public struct EnqueueRequest: Sendable, Hashable {
    /// `app_id`.
    public var app: String
    /// `payload`: the APNs payload (`nil` for an app without APNs: an Android-only app needs none).
    public var payload: Payload?
    /// `push_type`: `nil` is `alert`, or `liveactivity` for a ``Payload/liveActivity(_:)`` payload or a channel.
    public var pushType: PushType?
    /// `apns_priority`: 10, 5 or 1; `nil` is 10 (5 for `background`).
    public var apnsPriority: Int?
    /// `tokens`, `user_ids`, `tags` or `activity_ids`; ``Audience/everyone`` is every device of the app.
    public var audience: Audience
    /// `activity_type`: a Live Activity start goes to the push-to-start tokens of this `ActivityAttributes` type.
    public var activityType: String?
    /// `channel`: a Live Activity broadcast channel's name (one request reaches every subscriber).
    public var channel: String?
    /// `priority`: higher goes first in the queue (0 by default).
    public var priority: Int
    /// `send_at`: when to send (`nil` is now).
    public var sendAt: Date?
    /// `expires_at`: tokens not sent by then are not sent (status 0, reason `Expired`).
    public var expiresAt: Date?
    /// `collapse_id`: a newer notification with the same id replaces an older one on the device (64 bytes at most;
    /// Android's `collapse_key` when derived).
    public var collapseID: String?
    /// `idempotency_key`: unique per app; enqueueing the same key again returns the first job's id.
    public var idempotencyKey: String?
    /// `fcm`: the Android message; `nil` derives it from the APNs payload when the app has FCM.
    public var fcm: FCMMessage?
    /// `localized`: per-locale variants, each merged over the job's message for the devices of that locale.
    public var localized: [String: LocalizedVariant]?
    /// `badge`: ``Badge/increment`` sends each device its own counter, plus one.
    public var badge: Badge?
    /// `labels`: names for reports (`["campaign": "black-friday"]`), kept on the job and shown by the views; at most
    /// 32, names of 1 to 64 characters, values of at most 256.
    public var labels: [String: String]?
    /// `replace_key`: enqueueing cancels the app's pending jobs with the same key that have sent nothing yet
    /// (their end event is `job_replaced`); one that has sent is left to finish.
    public var replaceKey: String?
    /// `web`: the Web Push message, the JSON the site's service worker receives in its `push` event (encrypted for
    /// each subscription by the workers), or a Declarative Web Push object (`{"web_push": 8030, "notification":
    /// {"title": …, "navigate": …}}`); `nil` for a job without browsers. The database bounds its size.
    public var web: JSONValue?
    /// `web_urgency`: how soon browsers need the message (RFC 8030 `Urgency`); `nil` is the database's default.
    public var webUrgency: WebUrgency?
    /// `max_rate`: at most this many notifications per second for this job, across the whole fleet (to spare the
    /// producer's own servers when the devices wake up). The lower of it and the app's `rate_limit` wins; the app's
    /// other jobs are not held back.
    public var maxRate: Int?
    /// `spread_over`: the rate is the audience counted at expansion over this duration. Giving both it and
    /// ``maxRate`` is refused.
    public var spreadOver: Duration?
    /// `local_time`: each device receives the job at the first such time in its own zone (its `timezone`, else
    /// the app's `default_timezone`) at or after ``sendAt``.
    public var localTime: LocalTime?
    /// `respect_quiet_hours`: whether the app's quiet hours hold the job's devices back; `nil` is the default,
    /// respected below priority 10 and ignored from 10 up.
    public var respectQuietHours: Bool?
    /// `category`: the frequency cap (`push.apps.frequency_caps`) the job counts against. A person who already
    /// received the cap's `max` jobs of it within its window gets an outcome `FrequencyCapped` instead.
    public var category: String?

    public init(
        app: String, payload: Payload? = nil, pushType: PushType? = nil, apnsPriority: Int? = nil,
        audience: Audience = .everyone, activityType: String? = nil, channel: String? = nil, priority: Int = 0,
        sendAt: Date? = nil, expiresAt: Date? = nil, collapseID: String? = nil, idempotencyKey: String? = nil,
        fcm: FCMMessage? = nil, localized: [String: LocalizedVariant]? = nil, badge: Badge? = nil,
        labels: [String: String]? = nil, replaceKey: String? = nil, web: JSONValue? = nil, webUrgency: WebUrgency? = nil,
        maxRate: Int? = nil, spreadOver: Duration? = nil, localTime: LocalTime? = nil, respectQuietHours: Bool? = nil,
        category: String? = nil
    ) {
        self.app = app
        self.payload = payload
        self.pushType = pushType
        self.apnsPriority = apnsPriority
        self.audience = audience
        self.activityType = activityType
        self.channel = channel
        self.priority = priority
        self.sendAt = sendAt
        self.expiresAt = expiresAt
        self.collapseID = collapseID
        self.idempotencyKey = idempotencyKey
        self.fcm = fcm
        self.localized = localized
        self.badge = badge
        self.labels = labels
        self.replaceKey = replaceKey
        self.web = web
        self.webUrgency = webUrgency
        self.maxRate = maxRate
        self.spreadOver = spreadOver
        self.localTime = localTime
        self.respectQuietHours = respectQuietHours
        self.category = category
    }

    /// The push type sent: the one given, else `liveactivity` for a Live Activity payload, else `nil` (the
    /// database's default).
    var effectivePushType: PushType? {
        if let pushType { return pushType }
        if case .liveActivity = payload { return .liveActivity }
        return nil
    }
}

/// The APNs payload of a job: typed, or any JSON object.
public enum Payload: Sendable, Hashable, Encodable {
    case apns(APNsPayload)
    case liveActivity(LiveActivityPayload)
    /// A payload the builders do not cover; it must be a JSON object with an `aps` dictionary.
    case json(JSONValue)

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .apns(let payload): try payload.encode(to: encoder)
        case .liveActivity(let payload): try payload.encode(to: encoder)
        case .json(let value): try value.encode(to: encoder)
        }
    }
}

/// Who a job reaches (one of `push.enqueue`'s audience parameters, or none of them).
public enum Audience: Sendable, Hashable {
    /// Every device of the app (its push-to-start tokens, for a Live Activity start with an activity type).
    case everyone
    /// `tokens`: these device tokens (APNs hex, or FCM registration tokens for an app with FCM).
    case tokens([String])
    /// `user_ids`: every device of these users.
    case userIDs([String])
    /// `tags`: every device with any of these tags.
    case tags([String])
    /// `activity_ids`: the update tokens of these running Live Activities.
    case activityIDs([String])

    var tokens: [String]? { if case .tokens(let list) = self { list } else { nil } }
    var userIDs: [String]? { if case .userIDs(let list) = self { list } else { nil } }
    var tags: [String]? { if case .tags(let list) = self { list } else { nil } }
    var activityIDs: [String]? { if case .activityIDs(let list) = self { list } else { nil } }
}

/// An APNs push type (`apns-push-type`); the database knows which it accepts.
public struct PushType: RawRepresentable, Sendable, Hashable, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }

    public static let alert = PushType(rawValue: "alert")
    public static let background = PushType(rawValue: "background")
    public static let location = PushType(rawValue: "location")
    public static let voip = PushType(rawValue: "voip")
    public static let complication = PushType(rawValue: "complication")
    public static let fileProvider = PushType(rawValue: "fileprovider")
    public static let mdm = PushType(rawValue: "mdm")
    public static let liveActivity = PushType(rawValue: "liveactivity")
    public static let pushToTalk = PushType(rawValue: "pushtotalk")
    public static let widgets = PushType(rawValue: "widgets")
}

/// `push.enqueue(local_time => …)`: a time of day on a device's own clock.
public struct LocalTime: Sendable, Hashable, CustomStringConvertible {
    public var hour: Int
    public var minute: Int

    /// `hour` 0 to 23, `minute` 0 to 59; anything else is refused by the database (`local_time`).
    public init(hour: Int, minute: Int = 0) {
        self.hour = hour
        self.minute = minute
    }

    /// `09:00`: the text PostgreSQL reads as a `time`.
    public var description: String {
        String(format: "%02d:%02d", hour, minute)
    }
}

/// `push.enqueue(web_urgency => …)`: the RFC 8030 `Urgency` of a Web Push message, which lets a device on battery
/// wait for a better moment to wake.
public struct WebUrgency: RawRepresentable, Sendable, Hashable {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// On power and Wi-Fi only (an advertisement).
    public static let veryLow = WebUrgency(rawValue: "very-low")
    /// On power or Wi-Fi (a topic update).
    public static let low = WebUrgency(rawValue: "low")
    /// On neither (a chat message): what a push service assumes without the header.
    public static let normal = WebUrgency(rawValue: "normal")
    /// Low battery too (an incoming call, a time-sensitive alert).
    public static let high = WebUrgency(rawValue: "high")
}

extension EnqueueRequest {
    /// `push.enqueue(badge => …)`.
    public struct Badge: RawRepresentable, Sendable, Hashable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// Each device's counter moves by one, once per (job, device), and the new number is sent: APNs
        /// `aps.badge`, FCM `android.notification.notification_count`.
        public static let increment = Badge(rawValue: "increment")
    }
}

/// One locale's variant of a job (`localized`): a partial payload merged over the job's as a JSON Merge Patch
/// (RFC 7386), and a partial Android message merged over the job's.
///
/// A device gets its own locale's variant (`fr-ca`), else its language's (`fr`), else the job's message.
public struct LocalizedVariant: Sendable, Hashable, Encodable {
    enum Patch: Sendable, Hashable {
        case payload(Payload)
        case liveActivity(alert: LiveActivityPayload.Alert?, contentState: JSONValue?)
    }

    var patch: Patch?
    var fcm: FCMMessage?

    /// The fields of `payload` that are set override the job's (`APNsPayload(alert: .init(body: "…"))` keeps
    /// the job's title and sound); `fcm`'s set fields override the Android message's.
    public init(_ payload: APNsPayload? = nil, fcm: FCMMessage? = nil) {
        self.patch = payload.map { .payload(.apns($0)) }
        self.fcm = fcm
    }

    /// A Live Activity's variant: only its language may differ (the alert, the state it shows), never its event,
    /// timestamp or attributes.
    public init(liveActivityAlert alert: LiveActivityPayload.Alert?, contentState: JSONValue? = nil) {
        self.patch = .liveActivity(alert: alert, contentState: contentState)
    }

    /// A raw merge patch of the payload (`null` removes a key), and of the Android message.
    public init(patch: JSONValue, fcm: FCMMessage? = nil) {
        self.patch = .payload(.json(patch))
        self.fcm = fcm
    }

    public func encode(to encoder: any Encoder) throws {
        var variant: JSONValue
        switch patch {
        case .payload(let payload):
            variant = try JSONValue(encoding: payload)
        case .liveActivity(let alert, let contentState):
            var aps: [String: JSONValue] = [:]
            aps["alert"] = try alert.map(JSONValue.init(encoding:))
            aps["content-state"] = contentState
            variant = ["aps": .object(aps)]
        case nil:
            variant = [:]
        }
        if let fcm {
            guard case .object(var object) = variant else {
                throw EncodingError.invalidValue(variant, .init(
                    codingPath: encoder.codingPath, debugDescription: "a locale variant with fcm must be a JSON object"))
            }
            object["fcm"] = try JSONValue(encoding: fcm)
            variant = .object(object)
        }
        try variant.encode(to: encoder)
    }
}
