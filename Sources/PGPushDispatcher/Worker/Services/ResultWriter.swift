import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// Writes the chunks' completions, one batch at a time: completions that arrive while a write runs form the
/// next batch, written as soon as it returns (group commit, no timer). While the database is down it keeps
/// them (the state machine stops claiming) and retries with backoff, so no outcome is lost.
///
/// On graceful shutdown, which reaches it once every chunk has finished, it writes what is left until the
/// grace period is over; then it drops the rest, which the leases make safe.
struct ResultWriter: Service {
    let worker: Worker

    func run() async {
        _ = await withGracefulShutdownHandler {
            await worker.withinGracePeriod { await writeUntilSettled() }
        } onGracefulShutdown: {
            // Wakes the loop to see whether anything is left to write.
            worker.writeInbox.yield([])
        }
        let settled = worker.machine.withLock(\.writesSettled)
        if !settled { worker.perform(worker.machine.withLock { $0.graceEnded() }) }
    }

    private func writeUntilSettled() async {
        var failures = 0
        for await batch in worker.writes {
            if !batch.isEmpty {
                failures = await write(batch, failuresSoFar: failures)
            }
            if Task.isShuttingDownGracefully, worker.machine.withLock(\.writesSettled) { return }
        }
    }

    /// Writes one batch; returns the failures in a row after it.
    private func write(_ batch: [ChunkCompletion], failuresSoFar: Int) async -> Int {
        let started = ContinuousClock.now
        do {
            let report = try await worker.store.complete(batch)
            worker.heldChunks.withLock { held in
                for completion in batch { held.remove(completion.chunk.id) }
            }
            worker.metrics.completionDuration.record(duration: ContinuousClock.now - started)
            let sent = batch.reduce(0) { total, completion in
                report.leaseLost.contains(completion.chunk.id) ? total : total + completion.outcomes.count { $0.status != 0 }
            }
            worker.tokensSent.add(sent, ordering: .relaxed)
            for chunk in report.leaseLost {
                worker.metrics.leasesLost.increment()
                worker.logger.warning("lease lost; another worker records this chunk", metadata: ["chunk": "\(chunk)"])
            }
            worker.databaseAnswered()
            if failuresSoFar > 0 {
                worker.readiness.store(true, ordering: .relaxed)
                worker.logger.info("database is back; results written", metadata: ["completions": "\(batch.count)"])
            }
            let (actions, unwritten) = worker.machine.withLock { ($0.writeSucceeded(), $0.unwrittenCount) }
            worker.metrics.unwrittenResults.record(unwritten)
            worker.perform(actions)
            return 0
        } catch {
            let failures = failuresSoFar + 1
            let unwritten = worker.machine.withLock { machine -> Int in
                _ = machine.writeFailed()
                return machine.unwrittenCount
            }
            worker.metrics.unwrittenResults.record(unwritten)
            worker.readiness.store(false, ordering: .relaxed)
            worker.report(error, "writing results failed; keeping them and retrying", metadata: [
                "completions": "\(unwritten)", "attempt": "\(failures)",
            ])
            try? await Task.sleep(for: Worker.backoff(failures))
            worker.perform(worker.machine.withLock { $0.retryWrite() })
            return failures
        }
    }
}
