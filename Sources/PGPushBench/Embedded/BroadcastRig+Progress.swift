import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PGPushStore

extension DeliveryOutcome {
    var json: [String: Any] { ["status": status, "reason": jsonValue(reason), "count": count, "platform": platform] }
}

extension BroadcastRig {
    /// The job's row of `push.job_progress`, or `nil` for an unknown job. The per-platform split comes from the
    /// job's own counters, not from counting `push.deliveries`: a count per poll took a core's worth of the
    /// database from the worker being measured.
    func snapshot(job: Int64) async throws -> JobSnapshot? {
        try await operatorStore.jobProgress(job).map { JobSnapshot($0, byPlatform: configuration.withAndroid || configuration.withWeb) }
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
            if try await database.pendingPruneCandidates(job) == 0 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        return try await snapshot(job: job)
    }

    /// This app's outcomes by status and reason (all days).
    func deliveryOutcomes() async throws -> [DeliveryOutcome] {
        try await database.deliveryOutcomes(appID: appID)
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
