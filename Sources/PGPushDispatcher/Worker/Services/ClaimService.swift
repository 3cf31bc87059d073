import Foundation
import Logging
import PGPushCore
import PGPushStore
import ServiceLifecycle

/// Claims work sized to the free room, as the ``WorkerStateMachine`` decides, and hands the chunks to the
/// ``ChunkSender``. It sleeps until woken: by the expansion, by room freeing up, by written results or by the
/// poll tick.
///
/// Its graceful shutdown comes first: it starts the machine's shutdown (no new request starts, nothing more is
/// claimed or expanded), ends its loop and closes the hand-off, after which the sender drains.
struct ClaimService: Service {
    let store: any WorkerStore
    /// Each app's rate limits, read before every claim.
    let throttles: @Sendable () -> [String: AppThrottle]
    let scheduling: WorkerScheduling
    let lifecycle: WorkerLifecycle
    let handOff: ChunkHandOff
    let database: DatabaseReporter
    let health: HealthMonitor
    /// Woken every turn, so verdicts the chunks reached are written while the database is down too.
    let verdictWake: Wake
    let metrics: WorkerMetrics
    let lease: Duration
    let logger: Logger

    func run() async {
        await withGracefulShutdownHandler {
            await claimUntilStopped()
        } onGracefulShutdown: {
            logger.info("graceful shutdown: no new claims; draining in-flight requests")
            scheduling.perform(scheduling.decide { $0.shutdownRequested(at: .now) })
        }
        // The hand-off stays open: the sender closes it on its own shutdown, which the group starts once this
        // service has ended. (Closing it here let the sender end first, which the group reads as a service that
        // finished out of turn.) Chunks the expansion claims meanwhile give themselves back: sending has stopped.
    }

    private func claimUntilStopped() async {
        var failures = 0
        for await _ in scheduling.claimWake.signals {
            health.loopTurned()
            verdictWake.signal()
            let throttles = self.throttles()
            let next = scheduling.decide { $0.nextClaim(throttles: throttles) }
            let budget: ClaimBudget
            switch next {
            case .claim(let claim): budget = claim
            case .stopClaiming: return
            default:
                scheduling.perform(next)
                continue
            }
            do {
                // A claim in flight when the shutdown starts gets two seconds to return, so the chunks it took
                // are given back (a claim cancelled at once may still commit, leaving them locked until their
                // lease runs out). One waiting on an unreachable database must not hold the shutdown until its
                // deadline: cut short, what it took is rescued after the lease.
                let claimed = try await cancelWhenGracefulShutdown {
                    try await withCancellationDelayed(by: .seconds(2)) { try await claim(budget) }
                }
                failures = 0
                lifecycle.databaseTookWrite(true)
                database.answered()
                // Recorded as held before the chunks start: one that ends at once (its job was cancelled)
                // must not free room that was never taken.
                lifecycle.hold(claimed)
                let next = scheduling.decide {
                    $0.claimSucceeded(claimed.map { ($0.appID, $0.estimatedTokens) }, budget: budget)
                }
                if !handOff.offer(claimed) {
                    await lifecycle.giveBack(claimed.map(\.id), to: store, logger: logger,
                                             "could not give back chunks claimed during shutdown; they are rescued when their lease runs out")
                }
                scheduling.perform(next)
            } catch {
                let next = scheduling.decide { $0.claimFailed() }
                if case .stopClaiming = next { return }
                scheduling.perform(next)
                failures += 1
                lifecycle.databaseTookWrite(false)
                database.report(error, "claim failed; backing off")
                try? await Task.sleep(for: RetryBackoff.after(failures))
                scheduling.claimWake.signal()
            }
        }
    }

    private func claim(_ budget: ClaimBudget) async throws -> [ClaimedChunk] {
        let started = ContinuousClock.now
        let chunks = try await store.claimChunks(budget, lease: lease)
        if !chunks.isEmpty { metrics.claimDuration.record(duration: ContinuousClock.now - started) }
        return chunks
    }
}
