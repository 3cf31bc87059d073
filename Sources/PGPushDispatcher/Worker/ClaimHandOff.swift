import PGPushStore
import Synchronization

/// Chunks that the expansion claimed in its own statement, on their way to the claim service, which starts
/// every chunk the worker sends (and waits for them on shutdown).
final class ClaimHandOff: Sendable {
    private struct State {
        var waiting: [ClaimedChunk] = []
        var closed = false
    }

    private let state = Mutex(State())

    /// Queues `chunks` for the claim service. Returns false, queueing nothing, once the claim service has
    /// stopped starting chunks (shutdown): the caller gives them back.
    func offer(_ chunks: [ClaimedChunk]) -> Bool {
        guard !chunks.isEmpty else { return true }
        return state.withLock { state in
            guard !state.closed else { return false }
            state.waiting += chunks
            return true
        }
    }

    /// The chunks queued since the last call, in the order they were offered.
    func take() -> [ClaimedChunk] {
        state.withLock { state in
            defer { state.waiting = [] }
            return state.waiting
        }
    }

    /// The claim service starts no more chunks: returns what is still queued; later offers are refused.
    func close() -> [ClaimedChunk] {
        state.withLock { state in
            state.closed = true
            defer { state.waiting = [] }
            return state.waiting
        }
    }
}
