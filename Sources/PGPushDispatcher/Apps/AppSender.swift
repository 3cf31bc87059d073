import PGPushAPNs
import PGPushCore
import PGPushStore

/// What the worker needs to send for one app: its row, its connection pool and its rate limiter.
public struct AppSender: Sendable {
    public let app: AppRecord
    public let pool: APNsConnectionPool
    public let rateLimiter: RateLimiter?
    /// Adaptive in-flight limit for this app (slow start, halves on 429/503).
    let gate: ConcurrencyGate
    /// Check-outs by chunks; an idle sender's pool is closed.
    let usage = SenderUsage()

    /// Hands the sender back after a chunk used it.
    func checkIn() { usage.checkIn() }

    /// The `apns-topic` for a push type: the bundle id plus the suffix APNs requires for that type.
    public func topic(for pushType: PushType) -> String {
        let suffix = pushType.topicSuffix
        return suffix.isEmpty || app.topic.hasSuffix(suffix) ? app.topic : app.topic + suffix
    }
}
