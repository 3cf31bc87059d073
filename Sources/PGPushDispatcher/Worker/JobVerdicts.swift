import PGPushStore
import Synchronization

/// What a worker knows about jobs that must stop sending: cancelled ones (from NOTIFY) and ones that failed
/// with a job-level error (`InvalidPushType`, `TopicDisallowed` for a suffixed topic, …). Pure; the worker
/// shares it as ``JobVerdicts``.
struct JobVerdictState: Sendable {
    /// Job-level errors a job may get before it fails: "a handful", so one stray answer cannot end a job.
    let jobErrorThreshold: Int
    /// How many jobs of each kind are remembered. Forgetting old verdicts only means their chunks stop at the
    /// claim or the completion instead.
    let memory: Int
    private var cancelled: Set<Int64> = []
    private var failed: [Int64: String] = [:]
    private var jobErrors: [Int64: Int] = [:]
    /// A job-level error of a push service (413: the message is too large for it) fails the job's web part
    /// only: its iOS and Android devices are sent on. Kept in this worker; another worker learns it itself.
    private var webFailed: [Int64: String] = [:]
    private var webJobErrors: [Int64: Int] = [:]
    /// Failures to write to `push.jobs.failure_reason`, kept until a write succeeds.
    private var unwrittenFailures: [Int64: String] = [:]

    init(jobErrorThreshold: Int = 3, memory: Int = 10_000) {
        self.jobErrorThreshold = max(1, jobErrorThreshold)
        self.memory = max(1, memory)
    }

    mutating func cancel(_ job: Int64) {
        trim()
        cancelled.insert(job)
    }

    func isCancelled(_ job: Int64) -> Bool { cancelled.contains(job) }

    /// The reason a job failed with, if it did.
    func failure(of job: Int64) -> String? { failed[job] }

    /// The reason a job's devices of `platform` are not sent, if any: the job failed, or its web part did.
    func failure(of job: Int64, platform: DevicePlatform) -> String? {
        failed[job] ?? (platform == .web ? webFailed[job] : nil)
    }

    /// Records a push service's job-level error; once the job has had ``jobErrorThreshold`` of them its web
    /// part has failed. Returns true when this answer made it fail.
    mutating func recordWebJobError(_ job: Int64, reason: String) -> Bool {
        guard failed[job] == nil, webFailed[job] == nil, Self.count(job, in: &webJobErrors, threshold: jobErrorThreshold) else {
            return false
        }
        trim()
        webFailed[job] = reason
        return true
    }

    /// Counts one job-level error of `job` in `errors`; true (and the count forgotten) once it reaches `threshold`.
    private static func count(_ job: Int64, in errors: inout [Int64: Int], threshold: Int) -> Bool {
        let count = errors[job, default: 0] + 1
        guard count >= threshold else {
            errors[job] = count
            return false
        }
        errors[job] = nil
        return true
    }

    /// Records a job-level error answer; once the job has had ``jobErrorThreshold`` of them it has failed.
    /// A job of one request (a channel broadcast) fails `immediately`: its one answer is all there is.
    /// Returns true when this answer made it fail.
    mutating func recordJobError(_ job: Int64, reason: String, immediately: Bool = false) -> Bool {
        guard failed[job] == nil, Self.count(job, in: &jobErrors, threshold: immediately ? 1 : jobErrorThreshold) else { return false }
        trim()
        failed[job] = reason
        unwrittenFailures[job] = reason
        return true
    }

    /// A failure another worker recorded (read by the claim).
    mutating func adoptFailure(_ job: Int64, reason: String) {
        if failed[job] == nil { trim() }
        failed[job] = reason
    }

    /// Failures to write now; each stays pending until ``written(_:)``.
    var failuresToWrite: [Int64: String] { unwrittenFailures }

    mutating func written(_ job: Int64) {
        unwrittenFailures.removeValue(forKey: job)
    }

    /// Keeps memory bounded over a long-lived worker; a failure not yet written is never forgotten.
    private mutating func trim() {
        if cancelled.count >= memory { cancelled.removeAll(keepingCapacity: true) }
        if failed.count >= memory { failed = failed.filter { unwrittenFailures[$0.key] != nil } }
        if jobErrors.count >= memory { jobErrors.removeAll(keepingCapacity: true) }
        if webFailed.count >= memory { webFailed.removeAll(keepingCapacity: true) }
        if webJobErrors.count >= memory { webJobErrors.removeAll(keepingCapacity: true) }
    }
}

/// The worker's ``JobVerdictState``, shared by the chunks in flight, which check it before every token.
final class JobVerdicts: Sendable {
    private let state: Mutex<JobVerdictState>

    init(jobErrorThreshold: Int = 3) {
        state = Mutex(JobVerdictState(jobErrorThreshold: jobErrorThreshold))
    }

    func cancel(_ job: Int64) { state.withLock { $0.cancel(job) } }
    func isCancelled(_ job: Int64) -> Bool { state.withLock { $0.isCancelled(job) } }
    func failure(of job: Int64) -> String? { state.withLock { $0.failure(of: job) } }
    func failure(of job: Int64, platform: DevicePlatform) -> String? { state.withLock { $0.failure(of: job, platform: platform) } }
    @discardableResult
    func recordWebJobError(_ job: Int64, reason: String) -> Bool { state.withLock { $0.recordWebJobError(job, reason: reason) } }
    @discardableResult
    func recordJobError(_ job: Int64, reason: String, immediately: Bool = false) -> Bool {
        state.withLock { $0.recordJobError(job, reason: reason, immediately: immediately) }
    }
    func adoptFailure(_ job: Int64, reason: String) { state.withLock { $0.adoptFailure(job, reason: reason) } }
    func failuresToWrite() -> [Int64: String] { state.withLock(\.failuresToWrite) }
    func written(_ job: Int64) { state.withLock { $0.written(job) } }
}
