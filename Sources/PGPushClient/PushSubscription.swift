import Foundation

/// A browser's Web Push subscription (its `PushSubscription`), as the website's JavaScript gets it from
/// `subscription.toJSON()` and posts it to the backend:
/// `{"endpoint": "https://…", "expirationTime": null, "keys": {"p256dh": "…", "auth": "…"}}`.
///
/// Decode the posted body into it (unknown fields are ignored) and pass it to
/// ``PGPushClient/registerWebPush(app:subscription:userID:tags:locale:replaces:on:)``. Nothing is checked here:
/// the database checks the endpoint and keys, and names the field it refuses.
///
/// The endpoint and the keys together are enough to push to the browser: keep them out of logs.
/// `description` shows only the endpoint's host.
public struct PushSubscription: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The push service's URL for this browser; the device's token once registered.
    public var endpoint: String
    /// When the subscription expires, in milliseconds since 1970, if the browser says (most give `null`).
    public var expirationTime: Double?
    public var keys: Keys

    public struct Keys: Sendable, Hashable, Codable {
        /// The browser's P-256 public key, base64url.
        public var p256dh: String
        /// The 16-byte authentication secret, base64url.
        public var auth: String

        public init(p256dh: String, auth: String) {
            self.p256dh = p256dh
            self.auth = auth
        }
    }

    public init(endpoint: String, keys: Keys, expirationTime: Double? = nil) {
        self.endpoint = endpoint
        self.keys = keys
        self.expirationTime = expirationTime
    }

    enum CodingKeys: String, CodingKey {
        case endpoint, expirationTime, keys
    }

    /// Encodes `expirationTime` as `null` when absent, the shape `toJSON()` has.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(endpoint, forKey: .endpoint)
        try container.encode(expirationTime, forKey: .expirationTime)
        try container.encode(keys, forKey: .keys)
    }

    public var description: String {
        "PushSubscription(\(URL(string: endpoint)?.host ?? "?"))"
    }
}
