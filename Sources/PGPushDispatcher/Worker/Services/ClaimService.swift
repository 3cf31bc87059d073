import Foundation
import Logging
import PGPushCore
import PGPushStore
import ServiceLifecycle

/// Claims work sized to the free room, as the ``WorkerStateMachine`` decides, and sends each chunk in a child
/// task. It sleeps until woken: by the expansion, by room freeing up, by written results or by the poll tick.
///
/// On graceful shutdown it claims nothing more and waits for the chunks in flight, which stop starting
/// requests and give back what was not sent, until the grace period is over; whatever is still held then is
/// rescued after its lease.
struct ClaimService: Service {
    let worker: Worker

    func run() async {
        let drained = await withGracefulShutdownHandler {
            await worker.withinGracePeriod { await claimAndSend() }
        } onGracefulShutdown: {
            worker.logger.info("graceful shutdown: no new claims; draining in-flight requests")
            worker.stopSending.set()
            worker.perform(worker.machine.withLock { $0.shutdownRequested(at: .now) })
            worker.expansionWake.signal()
        }
        if !drained {
            worker.logger.warning("shutdown: chunks still sending at the end of the grace period are left to their leases")
        }
    }

    private func claimAndSend() async {
        // Discarding: a plain task group keeps every finished child until it is awaited, so a worker's memory
        // would grow with every chunk it ever sent.
        await withDiscardingTaskGroup { chunks in
            var failures = 0
            for await _ in worker.claimWake.signals {
                worker.health.withLock { $0.loopTurned(at: .now) }
                start(worker.claimHandOff.take(), in: &chunks)
                worker.verdictWake.signal()
                let throttles = worker.registry.throttles()
                let (next, draining) = worker.machine.withLock { ($0.nextClaim(throttles: throttles), $0.isDraining) }
                if draining { break }
                guard case .claim(let budget) = next else {
                    worker.perform(next)
                    continue
                }
                do {
                    // A claim waiting on an unreachable database must not hold the shutdown until its deadline;
                    // if one is cut short after it took chunks, their leases run out and they are rescued.
                    let claimed = try await cancelWhenGracefulShutdown { try await claim(budget) }
                    failures = 0
                    worker.readiness.store(true, ordering: .relaxed)
                    worker.databaseAnswered()
                    worker.heldChunks.withLock { $0.formUnion(claimed.map(\.id)) }
                    // Recorded as held before the chunks start: one that ends at once (its job was cancelled)
                    // must not free room that was never taken.
                    let next = worker.machine.withLock {
                        $0.claimSucceeded(claimed.map { ($0.appID, $0.estimatedTokens) }, budget: budget)
                    }
                    start(claimed, in: &chunks)
                    worker.perform(next)
                } catch {
                    worker.perform(worker.machine.withLock { $0.claimFailed() })
                    if worker.machine.withLock(\.isDraining) { break }
                    failures += 1
                    worker.readiness.store(false, ordering: .relaxed)
                    worker.report(error, "claim failed; backing off")
                    try? await Task.sleep(for: Worker.backoff(failures))
                    worker.claimWake.signal()
                }
            }
            // Chunks the expansion claimed meanwhile give themselves back: sending has stopped.
            start(worker.claimHandOff.close(), in: &chunks)
            // Leaving the group's scope waits for the chunks still sending.
        }
    }

    /// Sends claimed chunks: one-token chunks in batches (``ChunkBatchRun``), every other chunk in a task of its
    /// own.
    private func start(_ claimed: [ClaimedChunk], in chunks: inout DiscardingTaskGroup) {
        var batch: [ClaimedChunk] = []
        for chunk in claimed {
            guard ChunkBatchRun.takes(chunk) else {
                chunks.addTask { await ChunkRun(worker: worker, chunk: chunk).run() }
                continue
            }
            batch.append(chunk)
            if batch.count == ChunkBatchRun.maximumChunks {
                chunks.addTask { [batch] in await ChunkBatchRun(worker: worker, chunks: batch).run() }
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty {
            chunks.addTask { [batch] in await ChunkBatchRun(worker: worker, chunks: batch).run() }
        }
    }

    private func claim(_ budget: ClaimBudget) async throws -> [ClaimedChunk] {
        let started = ContinuousClock.now
        let chunks = try await worker.store.claimChunks(budget, lease: worker.configuration.lease)
        if !chunks.isEmpty { worker.metrics.claimDuration.record(duration: ContinuousClock.now - started) }
        return chunks
    }
}

extension Worker {
    /// Runs `work` until it ends, or until a graceful shutdown's grace period is over, whichever comes first;
    /// then cancels the other. Returns true when `work` ended first.
    func withinGracePeriod(_ work: @escaping @Sendable () async -> Void) async -> Bool {
        await withTaskGroup(of: Bool.self) { race in
            race.addTask { await work(); return true }
            race.addTask { await self.sleepUntilGraceIsOver(); return false }
            let workEnded = await race.next() ?? true
            race.cancelAll()
            return workEnded
        }
    }

    /// Returns once a graceful shutdown has started and its grace period is over, or when cancelled.
    private func sleepUntilGraceIsOver() async {
        do {
            try await gracefulShutdown()
            let deadline = machine.withLock { machine in
                // Normally the claim service started the shutdown; whichever service gets here first sets the deadline.
                _ = machine.shutdownRequested(at: .now)
                return machine.graceDeadline
            }
            guard let deadline else { return }
            try await Task.sleep(until: deadline, clock: .continuous)
        } catch {
            // Cancelled: the work this raced against ended first.
        }
    }
}
