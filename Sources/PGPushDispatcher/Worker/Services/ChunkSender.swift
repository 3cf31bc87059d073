import Logging
import PGPushStore
import ServiceLifecycle

/// Sends every chunk the worker claimed, from the ``ChunkHandOff`` the claim service and the expansion fill:
/// one-token chunks in batches (``ChunkBatchRun``), every other chunk in a task of its own (``ChunkRun``), all
/// in the one task group this service owns.
///
/// Its graceful shutdown comes right after the claim service's, which stops claiming, stops the sending and
/// closes the hand-off: it starts what is still queued (those chunks give themselves back) and waits for the
/// chunks in flight, which stop starting requests and give back what was not sent, until the grace period is
/// over; whatever is still held then is rescued after its lease.
struct ChunkSender: Service {
    let handOff: ChunkHandOff
    let sending: ChunkSending
    let scheduling: WorkerScheduling
    let logger: Logger

    func run() async {
        let handOff = self.handOff
        let drained = await withGracefulShutdownHandler {
            await scheduling.withinGracePeriod { await sendUntilClosed() }
        } onGracefulShutdown: {
            // The claim service has ended: nothing more is offered but the expansion's, which give themselves back.
            handOff.close()
        }
        if !drained {
            logger.warning("shutdown: chunks still sending at the end of the grace period are left to their leases")
        }
    }

    private func sendUntilClosed() async {
        // Discarding: a plain task group keeps every finished child until it is awaited, so a worker's memory
        // would grow with every chunk it ever sent.
        await withDiscardingTaskGroup { chunks in
            for await claimed in handOff.claims {
                start(claimed, in: &chunks)
            }
            // Leaving the group's scope waits for the chunks still sending.
        }
    }

    /// Sends claimed chunks: one-token chunks in batches (``ChunkBatchRun``), every other chunk in a task of its
    /// own.
    private func start(_ claimed: [ClaimedChunk], in chunks: inout DiscardingTaskGroup) {
        let sending = self.sending
        var batch: [ClaimedChunk] = []
        for chunk in claimed {
            guard ChunkBatchRun.takes(chunk) else {
                chunks.addTask { await ChunkRun(sending: sending, chunk: chunk).run() }
                continue
            }
            batch.append(chunk)
            if batch.count == ChunkBatchRun.maximumChunks {
                chunks.addTask { [batch] in await ChunkBatchRun(sending: sending, chunks: batch).run() }
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty {
            chunks.addTask { [batch] in await ChunkBatchRun(sending: sending, chunks: batch).run() }
        }
    }
}
