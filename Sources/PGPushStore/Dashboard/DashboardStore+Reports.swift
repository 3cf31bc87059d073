import Foundation
import PostgresNIO

/// Outcomes of one app, day, platform, status and reason (the outcomes page).
public struct DashboardOutcome: Sendable, Codable {
    public var day: String
    public var appID: String
    public var platform: String
    public var status: Int16
    public var reason: String?
    public var count: Int64
}

/// Pruned devices of one app, day and reason.
public struct DashboardPrunedCount: Sendable, Codable {
    public var day: String
    public var appID: String
    public var reason: String
    public var count: Int64
}

/// One pruned device; the token is whole here and shortened by whoever shows it.
public struct DashboardPrunedDevice: Sendable, Codable {
    public var prunedAt: Date
    public var appID: String
    public var token: String
    public var reason: String
    public var jobID: Int64?
}

/// One row of `push.operator_audit`.
public struct DashboardAuditEntry: Sendable, Codable {
    public var id: Int64
    public var at: Date
    public var actor: String
    public var action: String
    public var appID: String?
    public var detail: String?
}

extension DashboardReader {
    /// Outcomes per UTC day, app, platform, status and reason, for `sent_at` in [from, to): read from
    /// push.deliveries with that bound (not from push.delivery_stats, whose day filter would not prune partitions).
    public func outcomes(from: Date, to: Date, app: String?, platform: String?, reason: String?) async throws -> [DashboardOutcome] {
        // Grouped by the date and turned into text outside: grouped by the text, the planner expected a group per
        // row and sorted millions of rows on disk; by the date it hashes them (half the time at 2.4M rows).
        try await run("""
            SELECT day::text, app_id, platform, status, reason, n FROM (
                SELECT (sent_at AT TIME ZONE 'UTC')::date AS day, app_id, platform, status, reason, count(*) AS n
                  FROM push.deliveries
                 WHERE sent_at >= \(from)::timestamptz AND sent_at < \(to)::timestamptz
                   AND (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
                   AND (\(app)::text IS NULL OR app_id = \(app)::text)
                   AND (\(platform)::text IS NULL OR platform = \(platform)::text)
                   AND (\(reason)::text IS NULL OR reason = \(reason)::text)
                 GROUP BY 1, 2, 3, 4, 5
            ) per_day
             ORDER BY day DESC, n DESC, app_id, platform, status, reason
             LIMIT 1000
            """).map { row in
            let (day, app, platform, status, reason, count) = try row.decode((String, String, String, Int16, String?, Int64).self)
            return DashboardOutcome(day: day, appID: app, platform: platform, status: status, reason: reason, count: count)
        }
    }

    /// Pruned devices per app, UTC day and reason since `since` (index `pruned_devices_by_time`).
    public func prunedCounts(since: Date, app: String?) async throws -> [DashboardPrunedCount] {
        try await run("""
            SELECT day::text, app_id, reason, n FROM (
                SELECT (pruned_at AT TIME ZONE 'UTC')::date AS day, app_id, reason, count(*) AS n FROM push.pruned_devices
                 WHERE pruned_at >= \(since)::timestamptz
                   AND (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
                   AND (\(app)::text IS NULL OR app_id = \(app)::text)
                 GROUP BY 1, 2, 3
            ) per_day
             ORDER BY day DESC, n DESC, app_id, reason LIMIT 1000
            """).map { row in
            let (day, app, reason, count) = try row.decode((String, String, String, Int64).self)
            return DashboardPrunedCount(day: day, appID: app, reason: reason, count: count)
        }
    }

    /// The newest pruned devices.
    public func recentlyPruned(app: String?, limit: Int) async throws -> [DashboardPrunedDevice] {
        try await run("""
            SELECT pruned_at, app_id, token, reason, job_id FROM push.pruned_devices
             WHERE (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
               AND (\(app)::text IS NULL OR app_id = \(app)::text)
             ORDER BY pruned_at DESC LIMIT \(limit)
            """).map { row in
            let (at, app, token, reason, job) = try row.decode((Date, String, String, String, Int64?).self)
            return DashboardPrunedDevice(prunedAt: at, appID: app, token: token, reason: reason, jobID: job)
        }
    }

    /// The newest operator actions. A restricted login sees the rows of its apps only (rows without an app, such
    /// as a grant's, are an administrator's business).
    public func audit(app: String?, before: Int64?, limit: Int) async throws -> [DashboardAuditEntry] {
        try await run("""
            SELECT id, at, actor, action, app_id, detail FROM push.operator_audit
             WHERE (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
               AND (\(app)::text IS NULL OR app_id = \(app)::text)
               AND (\(before)::int8 IS NULL OR id < \(before)::int8)
             ORDER BY id DESC LIMIT \(limit + 1)
            """).map { row in
            let (id, at, actor, action, app, detail) = try row.decode((Int64, Date, String, String, String?, String?).self)
            return DashboardAuditEntry(id: id, at: at, actor: actor, action: action, appID: app, detail: detail)
        }
    }
}
