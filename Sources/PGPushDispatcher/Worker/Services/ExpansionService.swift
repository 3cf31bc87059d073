import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// Turns due jobs into chunks, apart from claiming so that neither waits for the other: small jobs in
/// batches, one statement each, until none is left; a broadcast's expansion as often as the
/// ``WorkerStateMachine`` says. Woken by NOTIFY, the poll tick and its own finds; it wakes the claim service
/// when it made work.
struct ExpansionService: Service {
    let worker: Worker

    static let smallJobBatch = 1000

    func run() async {
        await cancelWhenGracefulShutdown {
            var failures = 0
            for await _ in worker.expansionWake.signals {
                do {
                    try await expandWhenDue()
                    failures = 0
                } catch {
                    // Work already expanded keeps flowing: claiming does not wait for this service.
                    if Task.isCancelled { return }
                    failures += 1
                    worker.report(error, "expanding jobs failed")
                    try? await Task.sleep(for: Worker.backoff(failures))
                    worker.expansionWake.signal()
                }
            }
        }
    }

    private func expandWhenDue() async throws {
        while true {
            switch worker.machine.withLock({ $0.expansionWoken(at: .now) }) {
            case .expandAt(let instant):
                try await Task.sleep(until: instant, clock: .continuous)
            case .expand(let lookForLargeJob):
                try await expand(lookForLargeJob: lookForLargeJob)
                return
            default:
                return
            }
        }
    }

    /// Shutdown began while the statement ran: the chunks it claimed are released unsent, or rescued after
    /// their lease if the database does not take that.
    private func giveBack(_ chunks: [ClaimedChunk]) async {
        let ids = chunks.map(\.id)
        worker.heldChunks.withLock { held in for id in ids { held.remove(id) } }
        if (try? await worker.store.release(ids, deadline: .seconds(2))) == nil {
            worker.logger.warning("could not give back chunks claimed during shutdown; they are rescued when their lease runs out",
                                  metadata: ["chunks": "\(ids.count)"])
        }
    }

    private func expand(lookForLargeJob: Bool) async throws {
        let (store, chunkSize) = (worker.store, worker.configuration.chunkSize)
        while true {
            // Small jobs are expanded into this worker's room: their chunks are claimed as they are made, when
            // the claim would have taken them next. Without room they stay queued (see expansionClaim).
            let throttles = worker.registry.throttles()
            guard let budget = worker.machine.withLock({ $0.expansionClaim(throttles: throttles) }) else { break }
            // A job is at least one notification: more than the room could not all be claimed.
            let limit = min(Self.smallJobBatch, budget.maximumChunks, budget.room)
            let expansion: QueueStore.SmallJobExpansion
            do {
                expansion = try await store.expandDueSmallJobs(
                    chunkSize: chunkSize, limit: limit, claiming: budget, lease: worker.configuration.lease)
            } catch {
                worker.perform(worker.machine.withLock { $0.expansionClaimFailed() })
                throw error
            }
            // A claim like the claim service's: it shows the primary answering, as that one's does.
            worker.readiness.store(true, ordering: .relaxed)
            worker.databaseAnswered()
            let claimed = expansion.claimed
            if !claimed.isEmpty { worker.heldChunks.withLock { $0.formUnion(claimed.map(\.id)) } }
            // Recorded as held before the chunks can start, so their answers never free room not yet taken.
            let (action, more) = worker.machine.withLock {
                ($0.smallJobsExpanded(expansion.jobs, claimed: claimed.map { ($0.appID, $0.estimatedTokens) },
                                      budget: budget, unclaimedChunks: expansion.unclaimedChunks),
                 $0.hasMoreSmallJobs(expansion.jobs, batch: limit))
            }
            if !worker.claimHandOff.offer(claimed) { await giveBack(claimed) }
            worker.perform(action)
            if !more { break }
        }
        guard lookForLargeJob else { return }
        let expansion = try await store.expandNextDueJob(chunkSize: chunkSize, includingSmallJobs: false)
        worker.perform(worker.machine.withLock { $0.largeJobLooked(found: expansion != nil) })
        if let expansion {
            worker.logger.info("expanded job", metadata: [
                "job": "\(expansion.jobID)", "app": "\(expansion.appID)", "tokens": "\(expansion.total)", "chunks": "\(expansion.chunks)",
            ])
        }
    }
}
