import Foundation
import Logging
import PGPushCore
import PGPushStore
import ServiceLifecycle

/// Turns due jobs into chunks: small jobs a batch per wake, claimed by the statement that makes them as far
/// as this worker has room (the claim service starts them); a broadcast's expansion as often as the
/// ``WorkerStateMachine`` says. Woken by NOTIFY, the poll tick, its own finds and claim turns given to it; it
/// wakes the claim service when it made or claimed work.
struct ExpansionService: Service {
    let worker: Worker

    static let smallJobBatch = 1000
    static let smallestBatch = 100

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
                worker.machine.withLock { $0.expansionIdle() }
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

    /// One batch of due small jobs, expanded into this worker's room: their chunks are claimed as they are
    /// made, when the claim would have taken them next. Without room they stay queued (see expansionClaim).
    /// A full batch wakes this service again, so the claim service gets its turns in between.
    private func expandSmallJobs() async throws {
        let throttles = worker.registry.throttles()
        let (claiming, claimIsRunning) = worker.machine.withLock { ($0.expansionClaim(throttles: throttles), $0.claimIsRunning) }
        guard let budget = claiming else {
            if claimIsRunning { try await expandWithoutClaiming() }
            return
        }
        // A job is at least one notification: more than the room could not all be claimed. A small room still
        // expands a batch worth its statement; what it cannot take is left for the claim service.
        let limit = max(min(Self.smallJobBatch, budget.maximumChunks, budget.room), Self.smallestBatch)
        // Cancelled by shutdown like the claim service's claim, so an unreachable database cannot hold the
        // shutdown for a statement's deadline; chunks a cut-short statement took are rescued after their lease.
        let (action, more) = try await Self.claimSmallJobs(worker: worker, budget: budget, limit: limit)
        worker.perform(action)
        if more { worker.expansionWake.signal() }
    }

    /// While the claim service claims: small jobs become chunks at once, which that claim or the next takes
    /// in priority order (ahead of a broadcast's chunks of lower priority).
    private func expandWithoutClaiming() async throws {
        while true {
            let expanded = try await worker.store.expandDueSmallJobs(chunkSize: worker.configuration.chunkSize, limit: Self.smallJobBatch)
            let (action, more) = worker.machine.withLock {
                ($0.smallJobsExpanded(expanded), $0.hasMoreSmallJobs(expanded, batch: Self.smallJobBatch))
            }
            worker.perform(action)
            if !more { break }
        }
    }

    private static func claimSmallJobs(
        worker: Worker, budget: ClaimBudget, limit: Int
    ) async throws -> (WorkerStateMachine<ChunkCompletion>.Action, Bool) {
        let expansion: QueueStore.SmallJobExpansion
        do {
            expansion = try await worker.store.expandDueSmallJobs(
                chunkSize: worker.configuration.chunkSize, limit: limit, claiming: budget, lease: worker.configuration.lease)
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
        if !worker.claimHandOff.offer(claimed) { await giveBack(claimed, worker: worker) }
        return (action, more)
    }

    /// Shutdown began while the statement ran: the chunks it claimed are released unsent, or rescued after
    /// their lease if the database does not take that.
    private static func giveBack(_ chunks: [ClaimedChunk], worker: Worker) async {
        let ids = chunks.map(\.id)
        worker.heldChunks.withLock { held in for id in ids { held.remove(id) } }
        if (try? await worker.store.release(ids, deadline: .seconds(2))) == nil {
            worker.logger.warning("could not give back chunks claimed during shutdown; they are rescued when their lease runs out",
                                  metadata: ["chunks": "\(ids.count)"])
        }
    }

    private func expand(lookForLargeJob: Bool) async throws {
        try await expandSmallJobs()
        guard lookForLargeJob else { return }
        let expansion = try await worker.store.expandNextDueJob(chunkSize: worker.configuration.chunkSize, includingSmallJobs: false)
        worker.perform(worker.machine.withLock { $0.largeJobLooked(found: expansion != nil) })
        if let expansion {
            worker.logger.info("expanded job", metadata: [
                "job": "\(expansion.jobID)", "app": "\(expansion.appID)", "tokens": "\(expansion.total)", "chunks": "\(expansion.chunks)",
            ])
        }
    }
}
