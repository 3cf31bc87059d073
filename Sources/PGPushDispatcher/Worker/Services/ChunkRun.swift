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
        let processor = ChunkProcessor(
            maximumClaims: worker.configuration.maximumClaims, retryPolicy: worker.configuration.retryPolicy, store: worker.store,
            registry: worker.registry, appHealth: worker.appHealth, metrics: worker.metrics, logger: worker.logger,
            stopSending: worker.stopSending)

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
