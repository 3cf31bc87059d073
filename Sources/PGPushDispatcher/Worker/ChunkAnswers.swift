import Synchronization

/// Collects the answers of one chunk's requests as they arrive on the connections' event loops, and lets the
/// chunk's task wait for the last one. The requests themselves need no task each: at tens of thousands of
/// requests per second a child task per request cost more than the request.
final class ChunkAnswers: Sendable {
    private struct State {
        var answers: [ChunkProcessor.Answer] = []
        var expected = 0
        var sealed = false
        var waiter: (@Sendable ([ChunkProcessor.Answer]) -> Void)?
    }

    private let state: Mutex<State>

    init(capacity: Int) {
        var initial = State()
        initial.answers.reserveCapacity(capacity)
        state = Mutex(initial)
    }

    /// Called before a request starts: one more answer will come.
    func expectOne() {
        state.withLock { $0.expected += 1 }
    }

    func add(_ answer: ChunkProcessor.Answer) {
        let ready = state.withLock { state -> (@Sendable ([ChunkProcessor.Answer]) -> Void, [ChunkProcessor.Answer])? in
            state.answers.append(answer)
            guard state.sealed, state.answers.count == state.expected, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return (waiter, state.answers)
        }
        if let (waiter, answers) = ready { waiter(answers) }
    }

    /// No more requests will start: `handler` gets every answer once the last expected one is in (each request
    /// ends by its deadline at the latest), at once if they all are, else where the last one arrives.
    func whenAll(_ handler: @escaping @Sendable ([ChunkProcessor.Answer]) -> Void) {
        let answers = state.withLock { state -> [ChunkProcessor.Answer]? in
            state.sealed = true
            if state.answers.count == state.expected { return state.answers }
            state.waiter = handler
            return nil
        }
        if let answers { handler(answers) }
    }

    /// Waits until every expected answer is in and returns them (see ``whenAll(_:)``).
    func all() async -> [ChunkProcessor.Answer] {
        await withCheckedContinuation { continuation in
            whenAll { continuation.resume(returning: $0) }
        }
    }
}
