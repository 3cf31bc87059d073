import Foundation
import Logging
import PGPushStore

/// Sends one claimed chunk and hands its completion to the result writer. If its tokens cannot be read, it
/// retries; on shutdown it gives the chunk back instead, so a claimed chunk is never left locked and forgotten.
struct ChunkRun: Sendable {
    let worker: Worker
    let chunk: ClaimedChunk

    func run() async {
        let (worker, chunk) = (self.worker, self.chunk)
        let room = worker.roomReservation(for: chunk)
        defer { room.releaseRest() }
        let processor = worker.chunkProcessor()

        var failures = 0
        while true {
            do {
                let completion = try await processor.process(chunk, room: room, verdicts: worker.verdicts)
                worker.chunkFinished(completion, room: room)
                return
            } catch {
                failures += 1
                // The retry and the give-back have frames of their own, allocated only when a read fails.
                if await failed(error, failures: failures) { return }
            }
        }
    }

    /// After a failed read: on shutdown gives the chunk back and returns true (briefly, rather than retry into
    /// the grace period); otherwise reports the error, waits out its backoff and returns false.
    @inline(never)
    private func failed(_ error: any Error, failures: Int) async -> Bool {
        let metadata: Logger.Metadata = ["job": "\(chunk.jobID)", "app": "\(chunk.appID)", "chunk": "\(chunk.id)"]
        if worker.stopSending.isSet || Task.isCancelled {
            worker.heldChunks.withLock { _ = $0.remove(chunk.id) }
            if (try? await worker.store.release([chunk.id], deadline: .seconds(2))) == nil {
                worker.logger.warning("could not give the chunk back; it is rescued when its lease runs out", metadata: metadata)
            }
            return true
        }
        worker.report(error, "reading the chunk failed; retrying", metadata: metadata)
        try? await Task.sleep(for: Worker.backoff(failures))
        return false
    }
}

extension Worker {
    func chunkProcessor() -> ChunkProcessor {
        ChunkProcessor(
            maximumClaims: configuration.maximumClaims, retryPolicy: configuration.retryPolicy, store: store,
            registry: registry, appHealth: appHealth, metrics: metrics, logger: logger, stopSending: stopSending,
            runtime: runtime)
    }

    /// The room a claimed chunk holds, freed in the scheduler as its answers arrive.
    func roomReservation(for chunk: ClaimedChunk) -> RoomReservation {
        let small = machine.withLock { $0.isSmall(tokens: chunk.estimatedTokens) }
        return RoomReservation(tokens: chunk.estimatedTokens) { [self] tokens in
            perform(machine.withLock { $0.tokensFinished(app: chunk.appID, tokens: tokens, small: small) })
        }
    }

    /// A chunk ended: its room is free, and its completion goes to the result writer.
    func chunkFinished(_ completion: ChunkCompletion, room: RoomReservation) {
        room.releaseRest()
        let records = completion.outcomes.count + completion.requeued.reduce(0) { $0 + $1.tokens.count }
        perform(machine.withLock { $0.chunkCompleted(completion, records: records) })
    }
}
