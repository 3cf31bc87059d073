import PGPushTransport
import PGPushCore
import PGPushStore

/// What a sender's connections are for. Pushes to devices are the traffic; an app with Live Activity channels
/// also talks to APNs' channel management service (another host and port), and to the broadcast host when one
/// is configured apart from the device endpoint.
public enum SenderRole: String, Hashable, Sendable {
    case push
    case channels
    case broadcasts
}

/// Which sender of an app: one per provider and role, each with its own connections, rate limit and gate.
struct SenderKey: Hashable, Sendable {
    var appID: String
    var platform: DevicePlatform
    var role: SenderRole = .push

    /// The provider as pools and metrics label it: `apns`, `fcm`, or `apns-channels` and the like for the
    /// roles beside pushing.
    var providerLabel: String { role == .push ? platform.provider.rawValue : "\(platform.provider.rawValue)-\(role.rawValue)" }

    /// How the pool of this app and provider is named to its supervisor and in logs.
    var poolName: String { "\(appID)/\(providerLabel)" }
}

/// What the worker needs to send for one app to one provider (APNs for iOS devices, FCM for Android ones):
/// its row, its connection pool and its rate limiter.
public struct AppSender: Sendable {
    public let app: AppRecord
    public let platform: DevicePlatform
    public let pool: any PushConnectionPool
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
