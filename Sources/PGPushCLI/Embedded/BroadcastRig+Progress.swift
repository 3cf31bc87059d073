import Foundation
import PostgresNIO

/// One row of `push.delivery_stats` summed over days: how many outcomes had this status and reason.
struct DeliveryOutcome: Sendable {
    var status: Int
    var reason: String?
    var count: Int64
    var platform: String = "ios"

    var json: [String: Any] { ["status": status, "reason": jsonValue(reason), "count": count, "platform": platform] }
}

extension BroadcastRig {
    /// The job's row of `push.job_progress`, or `nil` for an unknown job.
    func snapshot(job: Int64) async throws -> JobSnapshot? {
        // The per-platform split comes from the job's own counters (as `push.job_progress` shows them), not from
        // counting `push.deliveries`: a count per poll took a core's worth of the database from the worker
        // being measured.
        let rows = try await query("""
            SELECT job_id, app_id, state, total, delivered, failed, pruned, pending, expired, ios_delivered, android_delivered
              FROM push.job_progress WHERE job_id = \(job)
            """)
        guard let row = rows.first else { return nil }
        let (id, app, state, total, delivered, failed, pruned, pending, expired, iosDelivered, androidDelivered) =
            try row.decode((Int64, String, String, Int64?, Int64, Int64, Int64, Int64, Int64, Int64?, Int64?).self)
        var snapshot = JobSnapshot(
            jobID: id, appID: app, state: state, total: total, delivered: delivered, failed: failed,
            pruned: pruned, pending: pending, expired: expired)
        if configuration.withAndroid {
            var split: [String: Int64] = [:]
            if let iosDelivered, iosDelivered > 0 { split["ios"] = iosDelivered }
            if let androidDelivered, androidDelivered > 0 { split["android"] = androidDelivered }
            snapshot.deliveredByPlatform = split
        }
        return snapshot
    }

    /// Polls the job every `interval` until it ends, handing each snapshot to `observe`; throws after `timeout`
    /// or when a worker dies.
    func waitForJob(
        _ job: Int64, interval: Duration, timeout: Duration, observe: (JobSnapshot, Double) -> Void
    ) async throws -> JobSnapshot {
        let clock = ContinuousClock()
        let start = clock.now
        while true {
            guard let snapshot = try await snapshot(job: job) else { throw EmbeddedError("job \(job) vanished") }
            let elapsed = clock.now - start
            observe(snapshot, elapsed.seconds)
            if snapshot.isFinished { return snapshot }
            guard elapsed < timeout else {
                throw EmbeddedError("job \(job) did not finish within \(timeout) (state \(snapshot.state), \(snapshot.pending) pending)")
            }
            try await checkWorkersAlive()
            sampleWorkerMemory()
            try await Task.sleep(for: interval)
        }
    }

    /// Waits until the pruner has handled every dead-token report of the job (bounded by `timeout`), and
    /// returns the final snapshot. Pruning runs in the workers' maintenance pass, after the job's last write.
    func waitForPruning(_ job: Int64, timeout: Duration) async throws -> JobSnapshot? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let rows = try await query("SELECT count(*) FROM push.prune_candidates WHERE job_id = \(job)")
            if try rows.first?.decode(Int64.self) == 0 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        return try await snapshot(job: job)
    }

    /// This app's outcomes by status and reason (all days).
    func deliveryOutcomes() async throws -> [DeliveryOutcome] {
        let rows = try await query("""
            SELECT status::int, reason, sum(count)::bigint, platform FROM push.delivery_stats
             WHERE app_id = \(appID) GROUP BY platform, status, reason ORDER BY platform DESC, status, reason NULLS FIRST
            """)
        return try rows.map { row in
            let (status, reason, count, platform) = try row.decode((Int, String?, Int64, String).self)
            return DeliveryOutcome(status: status, reason: reason, count: count, platform: platform)
        }
    }

    /// Seconds from the job's first claim (`started_at`, set when a worker expands it) to its last write
    /// (`finished_at`).
    func jobDuration(_ job: Int64) async throws -> Double? {
        let rows = try await query("""
            SELECT extract(epoch FROM finished_at - started_at)::float8 FROM push.jobs WHERE id = \(job)
            """)
        return try rows.first?.decode(Double?.self)
    }
}

/// Writes a progress line: rewritten in place on a terminal, else at most one line per second.
struct ProgressPrinter {
    let handle: FileHandle
    let isTerminal: Bool
    private var line = ProgressLine()
    private var lastPrinted: Double?

    init(handle: FileHandle) {
        self.handle = handle
        self.isTerminal = isatty(handle.fileDescriptor) != 0
    }

    mutating func show(_ snapshot: JobSnapshot, atSeconds seconds: Double) {
        line.observe(snapshot, atSeconds: seconds)
        if isTerminal {
            write("\r" + line.render(snapshot) + "\u{1B}[K" + (snapshot.isFinished ? "\n" : ""))
        } else if snapshot.isFinished || lastPrinted.map({ seconds - $0 >= 1 }) ?? true {
            write(line.render(snapshot) + "\n")
            lastPrinted = seconds
        }
    }

    func write(_ text: String) {
        handle.write(Data(text.utf8))
    }
}
