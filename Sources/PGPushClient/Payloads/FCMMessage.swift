import Foundation

/// An Android message for FCM HTTP v1, without its target (pgpush sets each device's token): what
/// `push.enqueue(fcm => …)` takes. Without one, an app with FCM gets a message derived from the APNs payload.
///
/// Every field is optional and left out when unset, so the same type writes a locale variant's partial Android
/// message. The database checks it (FCM's fields, string data, the ttl's form and limit, 4096 bytes) and names
/// `fcm` in its errors.
public struct FCMMessage: Sendable, Hashable, Encodable {
    /// `notification`: what the system shows.
    public var notification: Notification?
    /// `data`: string keys and values for the app (not `from`, `message_type`, `google.*` or `gcm.*`).
    public var data: [String: String]?
    /// `android`: Android's own options.
    public var android: Android?

    public init(notification: Notification? = nil, data: [String: String]? = nil, android: Android? = nil) {
        self.notification = notification
        self.data = data
        self.android = android
    }

    /// `notification`: title, body and image, for every platform FCM serves.
    public struct Notification: Sendable, Hashable, Encodable {
        public var title: String?
        public var body: String?
        /// An https URL of an image to show.
        public var image: String?

        public init(title: String? = nil, body: String? = nil, image: String? = nil) {
            self.title = title
            self.body = body
            self.image = image
        }
    }

    /// `android`: FCM's `AndroidConfig`.
    public struct Android: Sendable, Hashable, Encodable {
        /// `priority`: `HIGH` wakes the device, `NORMAL` may wait for it.
        public var priority: Priority?
        /// `ttl`: how long FCM keeps the message for an offline device (at most 28 days), written as `"600s"`.
        public var ttl: Duration?
        /// `collapse_key`: a newer message with the same key replaces one still waiting.
        public var collapseKey: String?
        /// `restricted_package_name`: only the app with this package name receives it.
        public var restrictedPackageName: String?
        /// `direct_boot_ok`: deliver before the device is unlocked after a reboot.
        public var directBootOK: Bool?
        /// `notification`: Android's own notification options.
        public var notification: Notification?
        /// `data`: data for Android only, overriding the message's `data`.
        public var data: [String: String]?

        public init(
            priority: Priority? = nil, ttl: Duration? = nil, collapseKey: String? = nil,
            restrictedPackageName: String? = nil, directBootOK: Bool? = nil, notification: Notification? = nil,
            data: [String: String]? = nil
        ) {
            self.priority = priority
            self.ttl = ttl
            self.collapseKey = collapseKey
            self.restrictedPackageName = restrictedPackageName
            self.directBootOK = directBootOK
            self.notification = notification
            self.data = data
        }

        public enum Priority: String, Sendable, Hashable, Encodable {
            case normal = "NORMAL"
            case high = "HIGH"
        }

        enum CodingKeys: String, CodingKey {
            case priority, ttl, notification, data
            case collapseKey = "collapse_key"
            case restrictedPackageName = "restricted_package_name"
            case directBootOK = "direct_boot_ok"
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encodeIfPresent(priority, forKey: .priority)
            try container.encodeIfPresent(ttl.map(Self.durationText), forKey: .ttl)
            try container.encodeIfPresent(collapseKey, forKey: .collapseKey)
            try container.encodeIfPresent(restrictedPackageName, forKey: .restrictedPackageName)
            try container.encodeIfPresent(directBootOK, forKey: .directBootOK)
            try container.encodeIfPresent(notification, forKey: .notification)
            try container.encodeIfPresent(data, forKey: .data)
        }

        /// A protobuf Duration's JSON form: seconds with up to nine decimals and an `s` ("600s", "1.5s").
        static func durationText(_ duration: Duration) -> String {
            let (seconds, attoseconds) = duration.components
            let nanoseconds = attoseconds / 1_000_000_000
            guard nanoseconds != 0 else { return "\(seconds)s" }
            var fraction = String(nanoseconds)
            fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
            while fraction.hasSuffix("0") { fraction.removeLast() }
            return "\(seconds).\(fraction)s"
        }

        /// `android.notification`: FCM's `AndroidNotification` (the fields most apps use).
        public struct Notification: Sendable, Hashable, Encodable {
            public var title: String?
            public var body: String?
            /// A drawable resource's name.
            public var icon: String?
            /// `#rrggbb`.
            public var color: String?
            /// A sound resource's name, or `"default"`.
            public var sound: String?
            /// A notification with the same tag replaces the one shown.
            public var tag: String?
            /// The activity intent to open.
            public var clickAction: String?
            /// The notification channel (Android 8 and later).
            public var channelID: String?
            public var image: String?
            /// The number shown on the launcher's badge. With ``EnqueueRequest/badge`` `.increment`, each
            /// device's own counter is written here.
            public var notificationCount: Int?

            public init(
                title: String? = nil, body: String? = nil, icon: String? = nil, color: String? = nil,
                sound: String? = nil, tag: String? = nil, clickAction: String? = nil, channelID: String? = nil,
                image: String? = nil, notificationCount: Int? = nil
            ) {
                self.title = title
                self.body = body
                self.icon = icon
                self.color = color
                self.sound = sound
                self.tag = tag
                self.clickAction = clickAction
                self.channelID = channelID
                self.image = image
                self.notificationCount = notificationCount
            }

            enum CodingKeys: String, CodingKey {
                case title, body, icon, color, sound, tag, image
                case clickAction = "click_action"
                case channelID = "channel_id"
                case notificationCount = "notification_count"
            }
        }
    }
}
