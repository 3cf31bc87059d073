import Foundation
import Logging
import PGPushCore
import PGPushStore
import ServiceLifecycle

/// Turns due jobs into chunks: small jobs a batch per wake, claimed by the statement that makes them as far
/// as this worker has room (the ``ChunkSender`` starts them); a broadcast's expansion as often as the
/// ``WorkerStateMachine`` says. Woken by NOTIFY, the poll tick, its own finds and claim turns given to it; it
/// wakes the claim service when it made or claimed work.
struct ExpansionService: Service {
    let store: any WorkerStore
    /// Each app's rate limits, read before claiming small jobs.
    let throttles: @Sendable () -> [String: AppThrottle]
    let scheduling: WorkerScheduling
    let lifecycle: WorkerLifecycle
    let handOff: ChunkHandOff
    let database: DatabaseReporter
    let chunkSize: Int
    let lease: Duration
    let logger: Logger

    static let smallJobBatch = 1000
    static let smallestBatch = 100

    func run() async {
        await cancelWhenGracefulShutdown {
            var failures = 0
            for await _ in scheduling.expansionWake.signals {
                do {
                    try await expandWhenDue()
                    failures = 0
                } catch {
                    // Work already expanded keeps flowing: claiming does not wait for this service.
                    if Task.isCancelled { return }
                    failures += 1
                    database.report(error, "expanding jobs failed")
                    try? await Task.sleep(for: RetryBackoff.after(failures))
                    scheduling.expansionWake.signal()
                }
                scheduling.decide { $0.expansionIdle() }
            }
        }
    }

    private func expandWhenDue() async throws {
        while true {
            switch scheduling.decide({ $0.expansionWoken(at: .now) }) {
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
        let throttles = self.throttles()
        switch scheduling.decide({ $0.smallJobTurn(throttles: throttles) }) {
        case .expandSmallJobs(claiming: let budget?):
            // A job is at least one notification: more than the room could not all be claimed. A small room still
            // expands a batch worth its statement; what it cannot take is left for the claim service.
            let limit = max(min(Self.smallJobBatch, budget.maximumChunks, budget.room), Self.smallestBatch)
            try await claimSmallJobs(budget: budget, limit: limit)
        case .expandSmallJobs(claiming: nil):
            try await expandWithoutClaiming()
        default:
            return
        }
    }

    /// While the claim service claims: small jobs become chunks at once, which that claim or the next takes
    /// in priority order (ahead of a broadcast's chunks of lower priority).
    private func expandWithoutClaiming() async throws {
        while true {
            let expanded = try await store.expandDueSmallJobs(chunkSize: chunkSize, limit: Self.smallJobBatch)
            let (action, more) = scheduling.decide {
                ($0.smallJobsExpanded(expanded), $0.hasMoreSmallJobs(expanded, batch: Self.smallJobBatch))
            }
            scheduling.perform(action)
            if !more { break }
        }
    }

    private func claimSmallJobs(budget: ClaimBudget, limit: Int) async throws {
        let expansion: QueueStore.SmallJobExpansion
        do {
            // As the claim service's claim: a shutdown gives the statement two seconds to return what it claimed,
            // which is then given back; one stuck on an unreachable database is cut short, and what it took is
            // rescued after the lease.
            let (store, chunkSize, lease) = (self.store, self.chunkSize, self.lease)
            expansion = try await withCancellationDelayed(by: .seconds(2)) {
                try await store.expandDueSmallJobs(chunkSize: chunkSize, limit: limit, claiming: budget, lease: lease)
            }
        } catch {
            scheduling.perform(scheduling.decide { $0.expansionClaimFailed() })
            throw error
        }
        // A claim like the claim service's: it shows the primary answering, as that one's does.
        lifecycle.databaseTookWrite(true)
        database.answered()
        let claimed = expansion.claimed
        lifecycle.hold(claimed)
        // Recorded as held before the chunks can start, so their answers never free room not yet taken.
        let actions = scheduling.decide {
            $0.smallJobsExpanded(expansion.jobs, claimed: claimed.map { ($0.appID, $0.estimatedTokens) },
                                 budget: budget, unclaimedChunks: expansion.unclaimedChunks, batch: limit)
        }
        if !handOff.offer(claimed) {
            // Shutdown began while the statement ran: the chunks it claimed are released unsent, or rescued
            // after their lease if the database does not take that.
            await lifecycle.giveBack(claimed.map(\.id), to: store, logger: logger,
                                     "could not give back chunks claimed during shutdown; they are rescued when their lease runs out",
                                     metadata: ["chunks": "\(claimed.count)"])
        }
        scheduling.perform(actions)
    }

    private func expand(lookForLargeJob: Bool) async throws {
        try await expandSmallJobs()
        guard lookForLargeJob else { return }
        let expansion = try await store.expandNextDueJob(chunkSize: chunkSize, includingSmallJobs: false)
        scheduling.perform(scheduling.decide { $0.largeJobLooked(found: expansion != nil) })
        if let expansion {
            logger.info("expanded job", metadata: [
                "job": "\(expansion.jobID)", "app": "\(expansion.appID)", "tokens": "\(expansion.total)", "chunks": "\(expansion.chunks)",
            ])
        }
    }
}
