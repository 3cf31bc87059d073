import PGPushStore
import Synchronization

/// Claimed chunks on their way to the ``ChunkSender``, which starts every chunk the worker sends: the claim
/// service's and the expansion's claims both arrive here, in the order they were offered.
///
/// The sender closes it on its graceful shutdown, after the claim service ended; it starts what is still queued
/// (those chunks give themselves back) and ends once they have finished. Offers after that are refused and
/// their chunks given back by whoever claimed them.
final class ChunkHandOff: Sendable {
    /// What the sender reads: ends once the hand-off is closed and everything queued was read.
    let claims: AsyncStream<[ClaimedChunk]>
    private let continuation: AsyncStream<[ClaimedChunk]>.Continuation
    private let closed = Mutex(false)

    init() {
        (claims, continuation) = AsyncStream.makeStream(of: [ClaimedChunk].self, bufferingPolicy: .unbounded)
    }

    /// Queues `chunks` for the sender. Returns false, queueing nothing, once the hand-off is closed: the caller
    /// gives them back.
    func offer(_ chunks: [ClaimedChunk]) -> Bool {
        guard !chunks.isEmpty else { return true }
        return closed.withLock { closed in
            guard !closed else { return false }
            continuation.yield(chunks)
            return true
        }
    }

    /// No more chunks start: later offers are refused; the sender still reads what is queued.
    func close() {
        closed.withLock { closed in
            closed = true
            continuation.finish()
        }
    }
}
