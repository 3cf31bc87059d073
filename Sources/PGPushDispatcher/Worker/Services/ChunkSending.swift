import Logging
import PGPushStore

/// What every chunk run needs to send a claimed chunk and hand its completion on: the processor that sends it,
/// the jobs' verdicts, the scheduler that frees its room and batches its completion, the lifecycle that holds
/// it (and takes it back on shutdown), the store to give it back to, and where read failures are reported.
struct ChunkSending: Sendable {
    let processor: ChunkProcessor
    /// Jobs cancelled or failed while this worker may hold their chunks: their tokens stop going out.
    let verdicts: JobVerdicts
    let scheduling: WorkerScheduling
    let lifecycle: WorkerLifecycle
    let store: any WorkerStore
    let database: DatabaseReporter
    let logger: Logger

    /// The room a claimed chunk holds, freed in the scheduler as its answers arrive.
    func roomReservation(for chunk: ClaimedChunk) -> RoomReservation {
        let scheduling = self.scheduling
        let small = scheduling.decide { $0.isSmall(tokens: chunk.estimatedTokens) }
        return RoomReservation(tokens: chunk.estimatedTokens) { tokens in
            scheduling.perform(scheduling.decide { $0.tokensFinished(app: chunk.appID, tokens: tokens, small: small) })
        }
    }

    /// A chunk ended: its room is free, and its completion goes to the result writer.
    func chunkFinished(_ completion: ChunkCompletion, room: RoomReservation) {
        room.releaseRest()
        let records = completion.outcomes.count + completion.requeued.reduce(0) { $0 + $1.tokens.count }
        scheduling.perform(scheduling.decide { $0.chunkCompleted(completion, records: records) })
    }
}
