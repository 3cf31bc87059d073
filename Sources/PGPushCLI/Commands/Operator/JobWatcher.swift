import Foundation
import PGPushCLISupport
import PGPushStore

/// Polls `push.job_progress` until a job ends, printing progress as it goes (shared by `watch` and
/// `enqueue --wait`).
///
/// Ends normally when the job is `done`; throws `OperatorError` with `.failed` (exit 1) when it `failed`,
/// `.jobCancelled` (exit 3) when it was cancelled, `.notFound` (exit 2) for an unknown job and `.timedOut`
/// (exit 124) when `timeout` passes first.
struct JobWatcher {
    enum Output {
        /// `\r`-rewritten progress line (standard output is a terminal).
        case live
        /// One plain line whenever the numbers change.
        case lines
        /// One JSON object per poll.
        case json
    }

    var jobID: Int64
    var interval: Duration
    var timeout: Duration?
    var output: Output

    static func defaultOutput(json: Bool) -> Output {
        if json { return .json }
        return isatty(STDOUT_FILENO) != 0 ? .live : .lines
    }

    func watch(on store: OperatorStore) async throws {
        let clock = ContinuousClock()
        let start = clock.now
        var progress = ProgressLine()
        var lastPrinted: String?
        // Bounded by the timeout when one is given; otherwise by the job ending (the operator can ^C).
        while true {
            guard let snapshot = try await store.jobProgress(jobID).map(JobSnapshot.init(watching:)) else {
                throw OperatorError(.notFound, "unknown job \(jobID)")
            }
            let elapsed = clock.now - start
            progress.observe(snapshot, atSeconds: elapsed.seconds)
            switch output {
            case .json:
                try printJSON(snapshot.json)
                flushStandardOutput()
            case .live:
                print("\r" + progress.render(snapshot) + "\u{1B}[K", terminator: snapshot.isFinished ? "\n" : "")
                flushStandardOutput()
            case .lines:
                // Compare without the rate so an idle job does not print the same line every poll.
                let key = ProgressLine(barWidth: progress.barWidth).render(snapshot)
                if key != lastPrinted {
                    print(progress.render(snapshot))
                    flushStandardOutput()
                    lastPrinted = key
                }
            }
            if snapshot.isFinished {
                try finish(snapshot)
                return
            }
            var pause = interval
            if let timeout {
                let remaining = timeout - elapsed
                guard remaining > .zero else {
                    if output == .live { print("") }
                    throw OperatorError(.timedOut, "timed out after \(timeout) waiting for job \(jobID) (state \(snapshot.state))")
                }
                pause = min(pause, remaining)
            }
            try await Task.sleep(for: pause)
        }
    }

    private func finish(_ snapshot: JobSnapshot) throws {
        if output != .json { print(ProgressLine.summary(snapshot)) }
        switch snapshot.state {
        case "failed":
            throw OperatorError(.failed, "job \(jobID) failed")
        case "cancelled":
            throw OperatorError(.jobCancelled, "job \(jobID) was cancelled")
        default:
            return
        }
    }

}
