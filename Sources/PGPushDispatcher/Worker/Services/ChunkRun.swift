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
        let small = worker.machine.withLock { $0.isSmall(tokens: chunk.estimatedTokens) }
        let room = RoomReservation(tokens: chunk.estimatedTokens) { tokens in
            worker.perform(worker.machine.withLock { $0.tokensFinished(app: chunk.appID, tokens: tokens, small: small) })
        }
        defer { room.releaseRest() }
        var logger = worker.logger
        logger[metadataKey: "job"] = "\(chunk.jobID)"
        logger[metadataKey: "app"] = "\(chunk.appID)"
        let processor = ChunkProcessor(
            configuration: worker.configuration, store: worker.store, registry: worker.registry, appHealth: worker.appHealth,
            metrics: worker.metrics, logger: logger, stopSending: worker.stopSending)

        var failures = 0
        while true {
            do {
                let completion = try await processor.process(chunk, room: room, verdicts: worker.verdicts)
                room.releaseRest()
                let records = completion.outcomes.count + completion.requeued.reduce(0) { $0 + $1.tokens.count }
                worker.perform(worker.machine.withLock { $0.chunkCompleted(completion, records: records) })
                return
            } catch {
                failures += 1
                // Shutting down: give the chunk back now, briefly, rather than retry into the grace period.
                if worker.stopSending.isSet || Task.isCancelled {
                    worker.heldChunks.withLock { _ = $0.remove(chunk.id) }
                    if (try? await worker.store.release([chunk.id], deadline: .seconds(2))) == nil {
                        logger.warning("could not give the chunk back; it is rescued when its lease runs out", metadata: ["chunk": "\(chunk.id)"])
                    }
                    return
                }
                worker.report(error, "reading the chunk failed; retrying", metadata: ["chunk": "\(chunk.id)"])
                try? await Task.sleep(for: Worker.backoff(failures))
            }
        }
    }
}
