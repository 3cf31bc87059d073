import PGPushTransport
import PGPushCore
import PGPushStore

/// Which sender of an app: one per provider, each with its own connections, rate limit and gate.
struct SenderKey: Hashable, Sendable {
    var appID: String
    var platform: DevicePlatform

    /// How the pool of this app and provider is named to its supervisor and in logs.
    var poolName: String { "\(appID)/\(platform.provider)" }
}

/// What the worker needs to send for one app to one provider (APNs for iOS devices, FCM for Android ones):
/// its row, its connection pool and its rate limiter.
public struct AppSender: Sendable {
    public let app: AppRecord
    public let platform: DevicePlatform
    public let pool: HTTP2ConnectionPool
    /// This worker's share of the app's `rate_limit`, if it has one.
    public let rateLimiter: RateLimiter?
    /// For FCM: this worker's share of the Firebase project's quota, shared with every app of the project.
    public let projectQuota: RateLimiter?
    /// Adaptive in-flight limit for this app (slow start, halves on 429/503).
    let gate: ConcurrencyGate
    /// Check-outs by chunks; an idle sender's pool is closed.
    let usage = SenderUsage()

    /// The FCM access-token source, for an FCM sender: it knows when a refreshed token was refused too.
    let fcmTokens: SharedFCMAccessTokenSource?

    /// Hands the sender back after a chunk used it.
    func checkIn() { usage.checkIn() }

    /// The `apns-topic` for a push type: the bundle id plus the suffix APNs requires for that type.
    public func topic(for pushType: PushType) -> String {
        let suffix = pushType.topicSuffix
        return suffix.isEmpty || app.topic.hasSuffix(suffix) ? app.topic : app.topic + suffix
    }

    /// The `messages:send` path of the app's Firebase project.
    var fcmSendPath: String? { app.fcmProjectID.map { FCMSendRequest.path(projectID: $0) } }
}
