import PGPushCore
import Synchronization

/// A token a provider rejected, to be reported to the source it came from.
struct HTTP2TokenRejection: Sendable {
    var source: any ProviderTokenSource
    var token: ProviderToken
    var reason: String
}

/// Rejected tokens of requests started with ``HTTP2ConnectionPool/start(_:onOutcome:)``, waiting to be
/// reported to their sources. A rejection is seen on the event loop, which cannot await the source; the
/// pool's ``HTTP2ConnectionPool/run()`` reports them in a child task and only then hands each caller its
/// outcome, so no report outlives the pool. Rejections are rare (about once an hour per credential).
final class HTTP2TokenRejections: Sendable {
    private struct Report {
        var rejection: HTTP2TokenRejection
        var outcome: ProviderOutcome
        var onOutcome: @Sendable (ProviderOutcome) -> Void
    }

    private struct State {
        var reports: [Report] = []
        var reader: CheckedContinuation<Void, Never>?
        var finished = false
    }

    private let state = Mutex(State())

    /// Queues a report. After ``finish()`` the pool no longer runs: the caller gets its outcome at once.
    func submit(
        _ rejection: HTTP2TokenRejection, outcome: ProviderOutcome, onOutcome: @escaping @Sendable (ProviderOutcome) -> Void
    ) {
        let (accepted, reader) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard !state.finished else { return (false, nil) }
            state.reports.append(Report(rejection: rejection, outcome: outcome, onOutcome: onOutcome))
            defer { state.reader = nil }
            return (true, state.reader)
        }
        reader?.resume()
        if !accepted { onOutcome(outcome) }
    }

    /// Reports every queued rejection, then hands its caller the outcome, until ``finish()``. Not cancellable:
    /// every queued caller must hear its outcome, so it ends only after ``finish()``.
    func deliver() async {
        while true {
            let batch = await nextBatch()
            if batch.isEmpty { return }
            for report in batch {
                await report.rejection.source.reportRejected(report.rejection.token, reason: report.rejection.reason)
                report.onOutcome(report.outcome)
            }
        }
    }

    /// No more reports: ``deliver()`` returns once the queued ones are delivered.
    func finish() {
        let reader = state.withLock { state in
            state.finished = true
            defer { state.reader = nil }
            return state.reader
        }
        reader?.resume()
    }

    /// The queued reports; empty only once finished.
    private func nextBatch() async -> [Report] {
        while true {
            let batch: [Report]? = state.withLock { state in
                guard state.reports.isEmpty else {
                    defer { state.reports.removeAll() }
                    return state.reports
                }
                return state.finished ? [] : nil
            }
            if let batch { return batch }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if !state.reports.isEmpty || state.finished { return true }
                    state.reader = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        }
    }
}
