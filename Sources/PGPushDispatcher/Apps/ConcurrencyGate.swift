import PGPushCore
import Synchronization

/// How many requests one app may have in flight from this worker, adapting like TCP: it starts small and
/// doubles per round trip while answers succeed, halves on 429 and 503, and recovers slowly. Senders await
/// a permit; the waiters are the only queue.
final class ConcurrencyGate: Sendable {
    private struct State {
        var limiter: AdaptiveConcurrency
        var inFlight = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Mutex<State>

    init(initial: Int = 16, maximum: Int) {
        state = Mutex(State(limiter: AdaptiveConcurrency(initial: initial, minimum: 4, maximum: max(maximum, initial), slowStart: true)))
    }

    var limit: Int { state.withLock { $0.limiter.limit } }

    func acquire() async {
        let granted = state.withLock { state in
            guard state.inFlight < state.limiter.limit else { return false }
            state.inFlight += 1
            return true
        }
        if granted { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.inFlight < state.limiter.limit {
                    state.inFlight += 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Returns a permit and records what the answer said about APNs' load.
    func release(overloaded: Bool, succeeded: Bool) {
        let wake = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.inFlight -= 1
            if overloaded { state.limiter.recordOverload() } else if succeeded { state.limiter.recordSuccess() }
            var woken: [CheckedContinuation<Void, Never>] = []
            while state.inFlight < state.limiter.limit, !state.waiters.isEmpty {
                state.inFlight += 1
                woken.append(state.waiters.removeFirst())
            }
            return woken
        }
        for continuation in wake { continuation.resume() }
    }
}
