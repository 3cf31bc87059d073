import Foundation
import Logging
import PostgresNIO

/// What `pgpush stats` shows, read from the statistics views.
struct StatsReport: Sendable {
    struct Outcome: Sendable {
        var day: String
        var appID: String
        var status: Int16
        var reason: String?
        var count: Int64
        /// ios (APNs) or android (FCM).
        var platform: String
    }

    struct Backlog: Sendable {
        var appID: String
        var tokens: Int64
        var oldestQueuedAt: Date?
        var oldestAgeSeconds: Double?
    }

    struct Job: Sendable {
        var jobID: Int64
        var appID: String
        var state: String
        var total: Int64?
        var delivered: Int64
        var failed: Int64
        var pruned: Int64
        var pending: Int64
        var createdAt: Date
        var finishedAt: Date?
    }

    var deliveries: [Outcome] = []
    var backlog: [Backlog] = []
    var jobs: [Job] = []

    static func load(
        on connection: PostgresConnection, app: String?, since: Date, jobLimit: Int, logger: Logger
    ) async throws -> StatsReport {
        var report = StatsReport()
        let deliveries = try await connection.query("""
            SELECT day::text, app_id, status, reason, count, platform FROM push.delivery_stats
             WHERE day >= (\(since)::timestamptz AT TIME ZONE 'UTC')::date
               AND (\(app)::text IS NULL OR app_id = \(app)::text)
             ORDER BY day DESC, app_id, platform, count DESC, status, reason
            """, logger: logger).collect()
        for row in deliveries {
            let (day, appID, status, reason, count, platform) = try row.decode((String, String, Int16, String?, Int64, String).self)
            report.deliveries.append(Outcome(day: day, appID: appID, status: status, reason: reason, count: count, platform: platform))
        }
        let backlog = try await connection.query("""
            SELECT app_id, backlog_tokens, oldest_queued_at, oldest_age_seconds FROM push.queue_backlog
             WHERE \(app)::text IS NULL OR app_id = \(app)::text
             ORDER BY app_id
            """, logger: logger).collect()
        for row in backlog {
            let (appID, tokens, oldest, age) = try row.decode((String, Int64?, Date?, Double?).self)
            report.backlog.append(Backlog(appID: appID, tokens: tokens ?? 0, oldestQueuedAt: oldest, oldestAgeSeconds: age))
        }
        let jobs = try await connection.query("""
            SELECT job_id, app_id, state, total, delivered, failed, pruned, pending, created_at, finished_at
              FROM push.job_progress
             WHERE \(app)::text IS NULL OR app_id = \(app)::text
             ORDER BY job_id DESC LIMIT \(jobLimit)
            """, logger: logger).collect()
        for row in jobs {
            let (id, appID, state, total, delivered, failed, pruned, pending, created, finished) =
                try row.decode((Int64, String, String, Int64?, Int64, Int64, Int64, Int64, Date, Date?).self)
            report.jobs.append(Job(
                jobID: id, appID: appID, state: state, total: total, delivered: delivered, failed: failed,
                pruned: pruned, pending: pending, createdAt: created, finishedAt: finished))
        }
        return report
    }

    var json: [String: Any] {
        [
            "deliveries": deliveries.map {
                ["day": $0.day, "app_id": $0.appID, "status": Int($0.status), "reason": jsonValue($0.reason), "count": $0.count, "platform": $0.platform]
            },
            "backlog": backlog.map {
                [
                    "app_id": $0.appID, "backlog_tokens": $0.tokens,
                    "oldest_queued_at": jsonValue(Timestamp.string($0.oldestQueuedAt)),
                    "oldest_age_seconds": jsonValue($0.oldestAgeSeconds),
                ] as [String: Any]
            },
            "jobs": jobs.map {
                [
                    "job_id": $0.jobID, "app_id": $0.appID, "state": $0.state, "total": jsonValue($0.total),
                    "delivered": $0.delivered, "failed": $0.failed, "pruned": $0.pruned, "pending": $0.pending,
                    "created_at": jsonValue(Timestamp.string($0.createdAt)),
                    "finished_at": jsonValue(Timestamp.string($0.finishedAt)),
                ] as [String: Any]
            },
        ]
    }

    func text(since: Date) -> String {
        var outcomes = Table(["DAY", "APP", "PLATFORM", "STATUS", "REASON", "COUNT"])
        for outcome in deliveries {
            outcomes.append([outcome.day, outcome.appID, outcome.platform, String(outcome.status), outcome.reason, String(outcome.count)])
        }
        var queue = Table(["APP", "BACKLOG", "OLDEST QUEUED", "AGE"])
        for entry in backlog {
            queue.append([
                entry.appID, String(entry.tokens), Timestamp.string(entry.oldestQueuedAt),
                entry.oldestAgeSeconds.map { ProgressLine.duration(max($0, 0)) },
            ])
        }
        var recent = Table(["JOB", "APP", "STATE", "TOTAL", "DELIVERED", "FAILED", "PRUNED", "PENDING", "CREATED", "FINISHED"])
        for job in jobs {
            recent.append([
                String(job.jobID), job.appID, job.state, job.total.map { String($0) }, String(job.delivered),
                String(job.failed), String(job.pruned), String(job.pending), Timestamp.string(job.createdAt),
                Timestamp.string(job.finishedAt),
            ])
        }
        func section(_ title: String, _ table: Table, empty: String) -> String {
            title + "\n" + (table.rows.isEmpty ? "  (\(empty))" : table.render())
        }
        return [
            section("Deliveries since \(Timestamp.string(since) ?? "-") (days in UTC)", outcomes, empty: "no deliveries"),
            section("Queue backlog", queue, empty: "nothing due"),
            section("Recent jobs", recent, empty: "no jobs"),
        ].joined(separator: "\n\n")
    }
}
