import Foundation
import Logging
import PGPushStore

/// Sends one claimed chunk and hands its completion to the result writer. If its tokens cannot be read, it
/// retries; on shutdown it gives the chunk back instead, so a claimed chunk is never left locked and forgotten.
struct ChunkRun: Sendable {
    let sending: ChunkSending
    let chunk: ClaimedChunk

    func run() async {
        let (sending, chunk) = (self.sending, self.chunk)
        let room = sending.roomReservation(for: chunk)
        defer { room.releaseRest() }

        var failures = 0
        while true {
            do {
                let completion = try await sending.processor.process(chunk, room: room, verdicts: sending.verdicts)
                sending.chunkFinished(completion, room: room)
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
        if sending.lifecycle.isStopping || Task.isCancelled {
            await sending.lifecycle.giveBack(
                [chunk.id], to: sending.store, logger: sending.logger,
                "could not give the chunk back; it is rescued when its lease runs out", metadata: metadata)
            return true
        }
        sending.database.report(error, "reading the chunk failed; retrying", metadata: metadata)
        try? await Task.sleep(for: RetryBackoff.after(failures))
        return false
    }
}
