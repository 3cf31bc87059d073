import PGPushStore
import PGPushTransport
import Synchronization

/// Sends one-token chunks from one task: a task of its own per one-user job cost more than the job's send
/// (creating it, its frames, a resume for its answer). The chunks start in claim order, which is priority
/// order; each completes on its own where its answer arrives, not after the others of the batch.
struct ChunkBatchRun: Sendable {
    /// One-token chunks in one task at most.
    static let maximumChunks = 32

    let sending: ChunkSending
    let chunks: [ClaimedChunk]

    /// Whether a claimed chunk is sent in a batch rather than in a ``ChunkRun`` of its own: a token list of one
    /// (it reads nothing from the database, so nothing of it can fail and be retried). A job with per-device
    /// content reads its device's locale and badge first, a web subscription its keys, and a capped category its
    /// person's slot, so they take a ChunkRun.
    static func takes(_ chunk: ClaimedChunk) -> Bool {
        chunk.kind == .tokens && chunk.tokens.count == 1 && !chunk.job.isPersonal && chunk.platform != .web && chunk.job.frequencyCap == nil
    }

    func run() async {
        let (context, processor) = (sending, sending.processor)
        let unfinished = Countdown(chunks.count)
        // The sender of the last chunk's app, held checked out by the batch while it starts chunks: the next
        // chunk of the same app takes it without a turn on the registry's actor. A sender checked out is never
        // closed as idle, and one replaced meanwhile (new credentials) is only used as a chunk in flight would.
        var shared: AppSender?
        // The batch's requests leave together, not one per chunk.
        let outbox = PushOutbox()
        for chunk in chunks {
            let room = context.roomReservation(for: chunk)
            var checkedOut: AppSender?
            if let shared, Self.sender(shared, serves: chunk) {
                shared.usage.checkOut()
                checkedOut = shared
            }
            switch await processor.start(chunk, tokens: chunk.tokens, room: room, verdicts: context.verdicts, checkedOut: checkedOut,
                                        outbox: outbox) {
            case .settled(let completion):
                context.chunkFinished(completion, room: room)
                unfinished.countDown()
            case .sending(let sending):
                if checkedOut == nil, Self.sender(sending.sender, serves: chunk) {
                    shared?.checkIn()
                    sending.sender.usage.checkOut()
                    shared = sending.sender
                }
                sending.answers.whenAll { answers in
                    context.chunkFinished(processor.finish(sending, answers: answers), room: room)
                    unfinished.countDown()
                }
            }
        }
        await outbox.send()
        shared?.checkIn()
        // Held until the last answer, like a ChunkRun: the sender's shutdown waits for its chunks.
        await unfinished.reachedZero()
    }

    /// Whether `sender` is the one the registry would check out for the chunk: a device push (not a Live
    /// Activity channel's broadcast) of the same app to the same provider.
    private static func sender(_ sender: AppSender, serves chunk: ClaimedChunk) -> Bool {
        chunk.job.channelID == nil && sender.app.id == chunk.appID && sender.platform == chunk.platform
    }
}

/// Counts the batch's chunks down as they complete, and lets the batch's task wait for the last.
final class Countdown: Sendable {
    private struct State {
        var left: Int
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state: Mutex<State>

    init(_ count: Int) {
        state = Mutex(State(left: count))
    }

    func countDown() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.left -= 1
            guard state.left == 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    func reachedZero() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if state.left <= 0 { return true }
                state.waiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }
}
