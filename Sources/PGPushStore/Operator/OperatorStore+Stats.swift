import Foundation
import PostgresNIO

/// One row of `push.delivery_stats`: outcomes of one app, day, platform, status and reason.
public struct DeliveryStat: Sendable {
    public var day: String
    public var appID: String
    public var status: Int16
    public var reason: String?
    public var count: Int64
    /// ios (APNs), android (FCM) or web (Web Push).
    public var platform: String
}

/// One row of `push.queue_backlog`.
public struct QueueBacklog: Sendable {
    public var appID: String
    public var tokens: Int64
    public var oldestQueuedAt: Date?
    public var oldestAgeSeconds: Double?
}

/// What `pgpush stats` reads (with ``OperatorStore/recentJobs(app:limit:)``); each query takes the app (`nil` for
/// all of them).
extension OperatorStore {
    /// Outcomes per day (UTC) from the day of `since` on, newest day first.
    public func deliveryStats(app: String?, since: Date) async throws -> [DeliveryStat] {
        try await run("""
            SELECT day::text, app_id, status, reason, count, platform FROM push.delivery_stats
             WHERE day >= (\(since)::timestamptz AT TIME ZONE 'UTC')::date
               AND (\(app)::text IS NULL OR app_id = \(app)::text)
             ORDER BY day DESC, app_id, platform, count DESC, status, reason
            """).map { row in
            let (day, appID, status, reason, count, platform) = try row.decode((String, String, Int16, String?, Int64, String).self)
            return DeliveryStat(day: day, appID: appID, status: status, reason: reason, count: count, platform: platform)
        }
    }

    /// Tokens due and not yet sent, per app.
    public func queueBacklog(app: String?) async throws -> [QueueBacklog] {
        try await run("""
            SELECT app_id, backlog_tokens, oldest_queued_at, oldest_age_seconds FROM push.queue_backlog
             WHERE \(app)::text IS NULL OR app_id = \(app)::text
             ORDER BY app_id
            """).map { row in
            let (appID, tokens, oldest, age) = try row.decode((String, Int64?, Date?, Double?).self)
            return QueueBacklog(appID: appID, tokens: tokens ?? 0, oldestQueuedAt: oldest, oldestAgeSeconds: age)
        }
    }
}
