import Foundation
import PGPushCLISupport
import PGPushStore

/// What `pgpush stats` shows, read from the statistics views.
struct StatsReport: Sendable {
    typealias Outcome = DeliveryStat
    typealias Backlog = QueueBacklog
    typealias Job = JobProgress

    var deliveries: [Outcome] = []
    var backlog: [Backlog] = []
    var jobs: [Job] = []

    static func load(from store: OperatorStore, app: String?, since: Date, jobLimit: Int) async throws -> StatsReport {
        StatsReport(
            deliveries: try await store.deliveryStats(app: app, since: since),
            backlog: try await store.queueBacklog(app: app),
            jobs: try await store.recentJobs(app: app, limit: jobLimit))
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
            "jobs": jobs.map { job in
                ([
                    "job_id": job.jobID, "app_id": job.appID, "state": job.state, "total": jsonValue(job.total),
                    "delivered": job.delivered, "failed": job.failed, "capped": job.capped, "pruned": job.pruned,
                    "pending": job.pending,
                    "created_at": jsonValue(Timestamp.string(job.createdAt)),
                    "finished_at": jsonValue(Timestamp.string(job.finishedAt)),
                ] as [String: Any]).merging(PlatformSplit(job).json) { first, _ in first }
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
        var recent = Table([
            "JOB", "APP", "STATE", "TOTAL", "DELIVERED", "BY PLATFORM", "FAILED", "CAPPED", "PRUNED", "PENDING", "CREATED",
            "FINISHED",
        ])
        for job in jobs {
            let split = PlatformSplit(job)
            recent.append([
                String(job.jobID), job.appID, job.state, job.total.map { String($0) }, String(job.delivered),
                split.isMixed ? split.text : nil, String(job.failed), String(job.capped), String(job.pruned), String(job.pending),
                Timestamp.string(job.createdAt), Timestamp.string(job.finishedAt),
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
