import Synchronization

/// What this worker knows about jobs that must stop sending: cancelled ones (from NOTIFY) and ones that failed
/// with a job-level error (`InvalidPushType`, `TopicDisallowed` for a suffixed topic, …). Chunks in flight check
/// it before every token.
final class JobVerdicts: Sendable {
    private struct State {
        var cancelled: Set<Int64> = []
        var failed: [Int64: String] = [:]
        var jobErrors: [Int64: Int] = [:]
        /// Failures to write to `push.jobs.failure_reason`, kept until a write succeeds.
        var unwrittenFailures: [Int64: String] = [:]

        /// Bounded: a long-lived worker sees many jobs; forgetting old verdicts only means their chunks stop at
        /// the claim or the completion instead.
        mutating func trim() {
            if cancelled.count > 10_000 { cancelled.removeAll(keepingCapacity: true) }
            if failed.count > 10_000 { failed = failed.filter { unwrittenFailures[$0.key] != nil } }
            if jobErrors.count > 10_000 { jobErrors.removeAll(keepingCapacity: true) }
        }
    }

    private let state = Mutex(State())
    /// Job-level errors a job may get before it fails: "a handful", so one stray answer cannot end a job.
    let jobErrorThreshold: Int

    init(jobErrorThreshold: Int = 3) {
        self.jobErrorThreshold = max(1, jobErrorThreshold)
    }

    func cancel(_ job: Int64) {
        state.withLock { state in
            state.trim()
            state.cancelled.insert(job)
        }
    }

    func isCancelled(_ job: Int64) -> Bool {
        state.withLock { $0.cancelled.contains(job) }
    }

    /// The reason a job failed with, if it did.
    func failure(of job: Int64) -> String? {
        state.withLock { $0.failed[job] }
    }

    /// Records a job-level error answer; once the job has had ``jobErrorThreshold`` of them it has failed.
    /// Returns true when this answer made it fail.
    @discardableResult
    func recordJobError(_ job: Int64, reason: String) -> Bool {
        state.withLock { state in
            guard state.failed[job] == nil else { return false }
            let count = state.jobErrors[job, default: 0] + 1
            state.jobErrors[job] = count
            guard count >= jobErrorThreshold else { return false }
            state.trim()
            state.failed[job] = reason
            state.unwrittenFailures[job] = reason
            state.jobErrors[job] = nil
            return true
        }
    }

    /// A failure another worker recorded (read by the claim).
    func adoptFailure(_ job: Int64, reason: String) {
        state.withLock { state in
            if state.failed[job] == nil { state.trim() }
            state.failed[job] = reason
        }
    }

    /// Failures to write now; each stays pending until ``written(_:)``.
    func failuresToWrite() -> [Int64: String] {
        state.withLock { $0.unwrittenFailures }
    }

    func written(_ job: Int64) {
        state.withLock { _ = $0.unwrittenFailures.removeValue(forKey: job) }
    }
}
