import Synchronization

/// Collects the answers of one chunk's requests as they arrive on the connections' event loops, and lets the
/// chunk's task wait for the last one. The requests themselves need no task each: at tens of thousands of
/// requests per second a child task per request cost more than the request.
final class ChunkAnswers: Sendable {
    private struct State {
        var answers: [ChunkProcessor.Answer] = []
        var expected = 0
        var sealed = false
        var waiter: CheckedContinuation<[ChunkProcessor.Answer], Never>?
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
        let ready = state.withLock { state -> (CheckedContinuation<[ChunkProcessor.Answer], Never>, [ChunkProcessor.Answer])? in
            state.answers.append(answer)
            guard state.sealed, state.answers.count == state.expected, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return (waiter, state.answers)
        }
        if let (waiter, answers) = ready { waiter.resume(returning: answers) }
    }

    /// Waits until every expected answer is in (each request ends by its deadline at the latest) and returns them.
    func all() async -> [ChunkProcessor.Answer] {
        await withCheckedContinuation { continuation in
            let answers = state.withLock { state -> [ChunkProcessor.Answer]? in
                state.sealed = true
                if state.answers.count == state.expected { return state.answers }
                state.waiter = continuation
                return nil
            }
            if let answers { continuation.resume(returning: answers) }
        }
    }
}
