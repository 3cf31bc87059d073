import Foundation
import PostgresNIO

/// An app as the overview lists it.
public struct DashboardAppSummary: Sendable, Codable {
    public var id: String
    public var environment: String
    public var pausedReason: String?
    public var pausedAt: Date?
    /// Only the app's Web Push is paused (a push service refused its VAPID credential); APNs and FCM send on.
    public var webPushPausedReason: String?
}

/// Sends in one minute of the last hour, per platform.
public struct SendsInMinute: Sendable, Codable {
    /// Minutes since the start of the window (0 … 59).
    public var minute: Int
    public var platform: String
    public var count: Int64
}

/// What the overview shows; one snapshot is shared between clients for a few seconds.
public struct DashboardOverview: Sendable, Codable {
    public var takenAt: Date
    public var apps: [DashboardAppSummary]
    public var backlogTokens: Int64
    public var oldestQueuedAgeSeconds: Double?
    /// The first minute of the sends chart (now − 60 min, on a minute boundary).
    public var windowStart: Date
    public var sendsPerMinute: [SendsInMinute]
    /// Outcomes of the jobs that finished in the last 24 h or are still active.
    public var delivered: Int64
    public var failed: Int64
    public var enqueueToFirstSendP50: Double?
    public var enqueueToFirstSendP95: Double?
    public var workersAlive: Int64
    public var workersReady: Int64
}

extension DashboardReader {
    /// The overview's aggregates. Every statement is time-bounded: the deliveries of the last hour only (their
    /// daily partitions are pruned to one or two), the jobs that finished in the last day (`jobs_finished`) or
    /// are active (`jobs_active`); `push.delivery_stats` is not read at all.
    public func overview(now: Date = Date()) async throws -> DashboardOverview {
        let apps = try await run("""
            SELECT id, environment, paused_reason, paused_at, web_push_paused_reason FROM push.apps
             WHERE \(granted)::text[] IS NULL OR id = ANY (\(granted)::text[])
             ORDER BY id
            """).map { row in
            let (id, environment, reason, at, webReason) = try row.decode((String, String, String?, Date?, String?).self)
            return DashboardAppSummary(
                id: id, environment: environment, pausedReason: reason, pausedAt: at, webPushPausedReason: webReason)
        }
        // push.queue_backlog filters by the granted apps itself.
        let backlog = try await single("""
            SELECT coalesce(sum(backlog_tokens), 0)::int8, max(oldest_age_seconds) FROM push.queue_backlog
            """).decode((Int64, Double?).self)

        let minute = floor(now.timeIntervalSince1970 / 60) * 60
        let windowStart = Date(timeIntervalSince1970: minute - 59 * 60)
        let sends = try await run("""
            SELECT floor(extract(epoch FROM sent_at - \(windowStart)::timestamptz) / 60)::int4 AS m, platform, count(*)
              FROM push.deliveries
             WHERE sent_at >= \(windowStart)::timestamptz
               AND (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
             GROUP BY 1, 2 ORDER BY 1, 2
            """).map { row in
            let (m, platform, count) = try row.decode((Int32, String, Int64).self)
            return SendsInMinute(minute: Int(m), platform: platform, count: count)
        }

        let since = now.addingTimeInterval(-86_400)
        // Two arms, one per partial index, rather than an OR the planner might answer with a scan of push.jobs.
        let jobs = try await single("""
            WITH recent AS (
                SELECT delivered, failed + expired AS failed, first_sent_at - greatest(created_at, send_at) AS latency
                  FROM push.jobs
                 WHERE state IN ('done', 'failed', 'cancelled') AND finished_at >= \(since)::timestamptz
                   AND (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
                UNION ALL
                SELECT delivered, failed + expired, first_sent_at - greatest(created_at, send_at)
                  FROM push.jobs
                 WHERE state IN ('queued', 'running')
                   AND (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
            )
            SELECT coalesce(sum(delivered), 0)::int8, coalesce(sum(failed), 0)::int8,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM latency)),
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM latency))
              FROM recent
            """).decode((Int64, Int64, Double?, Double?).self)

        // Alive: heartbeat within the default 30-second lease. Ready: heartbeat within 15 s, a heartbeat interval
        // (10 s) and some slack; a draining worker stops its heartbeat and a stopped one deregisters.
        let workers = try await single("""
            SELECT count(*) FILTER (WHERE heartbeat_at > now() - interval '30 seconds'),
                   count(*) FILTER (WHERE heartbeat_at > now() - interval '15 seconds')
              FROM push.workers
            """).decode((Int64, Int64).self)

        return DashboardOverview(
            takenAt: now, apps: apps, backlogTokens: backlog.0, oldestQueuedAgeSeconds: backlog.1,
            windowStart: windowStart, sendsPerMinute: sends, delivered: jobs.0, failed: jobs.1,
            enqueueToFirstSendP50: jobs.2, enqueueToFirstSendP95: jobs.3, workersAlive: workers.0, workersReady: workers.1)
    }
}
