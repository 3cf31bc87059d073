import Synchronization

/// Claims whose answers are on their way: while holding, a claim that took chunks has them under its lease in
/// the store but does not return them to the worker until ``answer()`` (or until its task is cancelled, when it
/// throws). The moment a database has committed a claim and its reply has not arrived yet.
public final class HeldClaimAnswers: Sendable {
    private struct State {
        var holding = false
        var waiting: [UInt64: CheckedContinuation<Bool, Never>] = [:]
        var nextID: UInt64 = 0
        var held = 0
        var heldWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// From now on, claims that took chunks wait for ``answer()``.
    public func hold() {
        state.withLock { $0.holding = true }
    }

    /// Lets every waiting claim return, and stops holding.
    public func answer() {
        let waiting = state.withLock { state in
            state.holding = false
            defer { state.waiting = [:] }
            return Array(state.waiting.values)
        }
        for continuation in waiting { continuation.resume(returning: true) }
    }

    /// Returns once a claim is waiting for its answer.
    public func waitForHeldClaim() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.held > 0 { return true }
                state.heldWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Called by the store after a claim took its chunks: waits while holding. Throws `CancellationError` when
    /// the claiming task is cancelled first (the chunks stay under its lease, as on a real server).
    func arrive() async throws {
        let id = state.withLock { state -> UInt64? in
            guard state.holding else { return nil }
            state.nextID += 1
            return state.nextID
        }
        guard let id else { return }
        let answered = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let (cancelled, ready) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
                    guard state.holding, !Task.isCancelled else { return (true, []) }
                    state.waiting[id] = continuation
                    state.held += 1
                    defer { state.heldWaiters = [] }
                    return (false, state.heldWaiters)
                }
                for waiter in ready { waiter.resume() }
                if cancelled { continuation.resume(returning: !Task.isCancelled) }
            }
        } onCancel: {
            let continuation = state.withLock { $0.waiting.removeValue(forKey: id) }
            continuation?.resume(returning: false)
        }
        if !answered { throw CancellationError() }
    }
}
