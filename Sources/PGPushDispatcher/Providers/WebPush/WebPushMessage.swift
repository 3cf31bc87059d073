import Foundation
import PGPushCore

/// One Web Push message (RFC 8030) to one subscription, before encryption: the site's plaintext and the headers
/// the push service reads.
struct WebPushMessage: Sendable {
    var subscription: WebPushSubscription
    /// What the site's service worker receives (encrypted on the way, RFC 8291).
    var plaintext: [UInt8]
    /// `TTL`: seconds the push service keeps the message for a device that is offline; 0 means now or never.
    var timeToLive: Int
    var urgency: WebPushUrgency?
    var topic: WebPushTopic?

    /// The longest `TTL` sent: four weeks, what the public push services keep a message at most.
    static let maximumTimeToLive = 28 * 24 * 3600

    /// The `TTL` for a job that expires at `expiresAt` (none: ``maximumTimeToLive``), seen at `now`; an expiry in
    /// the past gives 0.
    static func timeToLive(expiresAt: Date?, now: Date) -> Int {
        guard let expiresAt else { return maximumTimeToLive }
        let seconds = expiresAt.timeIntervalSince(now).rounded(.down)
        return Int(min(max(seconds, 0), Double(maximumTimeToLive)))
    }

    /// The request's headers, with the VAPID `Authorization` of `token`. The body's encoding is aes128gcm.
    func headers(authorization token: VAPIDToken) -> [(String, String)] {
        var headers: [(String, String)] = [
            ("TTL", String(timeToLive)),
            ("Content-Encoding", WebPushEncryption.contentEncoding),
            ("Content-Type", "application/octet-stream"),
            ("Authorization", token.authorization),
        ]
        if let urgency { headers.append((WebPushUrgency.headerName, urgency.rawValue)) }
        if let topic { headers.append((WebPushTopic.headerName, topic.value)) }
        return headers
    }
}

/// What sending one Web Push message came to.
enum WebPushAnswer: Sendable, Equatable {
    /// The push service answered. `reason` is what its body says (Apple's `{"reason": "BadJwtToken"}`), if
    /// anything short and readable; `retryAfter` is its `Retry-After`.
    case answered(status: Int, reason: String?, retryAfter: Duration?)
    /// The endpoint's origin is not one workers send to (``WebPushOrigins``): nothing was sent and no connection
    /// was made.
    case endpointNotAllowed
    /// The message could not be made (a plaintext too large, a key the encryption refused): nothing was sent.
    case unsendable(String)
    /// No answer: a timeout, a refused or broken connection, a TLS failure.
    case noAnswer(String)

    /// The reason recorded for a token whose endpoint is not allowed.
    static let endpointNotAllowedReason = "EndpointNotAllowed"
}
