import PGPushCore
import Synchronization

/// How many requests one app may have in flight from this worker, adapting like TCP: it starts small and
/// doubles per round trip while answers succeed, halves on 429 and 503 (beyond a few per window), and
/// recovers slowly. It also stays below what the round trips show fills the path (``QueueingDelayLimit``):
/// requests beyond that would only queue, on a busy host or at the provider, ahead of the next urgent
/// notification. Senders await a permit; the waiters are the only queue, and a waiter of a higher job
/// priority is let in first.
final class ConcurrencyGate: Sendable {
    private struct Waiter {
        var priority: Int
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var limiter: AdaptiveConcurrency
        var delay: QueueingDelayLimit
        var inFlight = 0
        /// Highest priority first; first come, first served within a priority.
        var waiters: [Waiter] = []
        var backingOff = false

        mutating func enqueue(_ waiter: Waiter) {
            // Waiters mostly arrive at equal priority, so searching from the end is short.
            var index = waiters.endIndex
            while index > waiters.startIndex, waiters[index - 1].priority < waiter.priority { index -= 1 }
            waiters.insert(waiter, at: index)
        }

        var limit: Int { min(limiter.limit, delay.limit) }
    }

    private let state: Mutex<State>
    let maximum: Int
    /// Up to 5 % of a window's answers may be 429/503 without a cut: APNs' occasional 503s are not its load.
    /// Past it, as when APNs sheds load in earnest, the limit halves as before.
    static let toleratedOverloadShare = 0.05

    init(initial: Int = 16, maximum: Int) {
        let maximum = max(maximum, initial)
        self.maximum = maximum
        state = Mutex(State(
            limiter: AdaptiveConcurrency(
                initial: initial, minimum: 4, maximum: maximum, slowStart: true,
                toleratedOverloadShare: Self.toleratedOverloadShare),
            delay: QueueingDelayLimit(configuration: .init(minimum: initial, maximum: maximum))))
    }

    var limit: Int { state.withLock { $0.limit } }

    /// The limit while the app backs off after 429/503 and has not grown back to half its maximum; `nil`
    /// otherwise. The scheduler claims little of such an app, so it holds no room other apps could use.
    var backoffLimit: Int? {
        state.withLock { $0.backingOff ? $0.limiter.limit : nil }
    }

    func acquire(priority: Int = 0) async {
        if tryAcquire() { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.inFlight < state.limit {
                    state.inFlight += 1
                    return true
                }
                state.enqueue(Waiter(priority: priority, continuation: continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Takes a permit if one is free now, without waiting.
    func tryAcquire() -> Bool {
        state.withLock { state in
            guard state.inFlight < state.limit else { return false }
            state.inFlight += 1
            return true
        }
    }

    /// Returns a permit and records what the answer said about the provider's load: a successful answer's
    /// `roundTrip` (from the request's start) tells how deep the queue ahead of it was.
    func release(overloaded: Bool, succeeded: Bool, roundTrip: Duration? = nil, now: ContinuousClock.Instant = .now) {
        let wake = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.inFlight -= 1
            if overloaded {
                if state.limiter.recordOverload(now: now) { state.backingOff = true }
            } else if succeeded {
                state.limiter.recordSuccess()
                if let roundTrip { state.delay.record(roundTrip, now: now) }
                if state.backingOff && state.limiter.limit * 2 >= maximum { state.backingOff = false }
            }
            var woken: [CheckedContinuation<Void, Never>] = []
            var taken = 0
            while state.inFlight < state.limit, taken < state.waiters.count {
                state.inFlight += 1
                woken.append(state.waiters[taken].continuation)
                taken += 1
            }
            if taken > 0 { state.waiters.removeFirst(taken) }
            return woken
        }
        for continuation in wake { continuation.resume() }
    }
}
