import Foundation
import Logging
import PGPushStore
import ServiceLifecycle
import Synchronization

/// Writes the chunks' completions, one batch at a time: completions that arrive while a write runs form the
/// next batch, written as soon as it returns (group commit, no timer). While the database is down it keeps
/// them (the state machine stops claiming) and retries with backoff, so no outcome is lost.
///
/// On graceful shutdown, which reaches it once every chunk has finished, it writes what is left until the
/// grace period is over; then it drops the rest, which the leases make safe.
struct ResultWriter: Service {
    let store: any WorkerStore
    /// The batches to write (``WorkerScheduling/writes``), and where each write is reported.
    let scheduling: WorkerScheduling
    /// Whose chunks are no longer held once written; the writes' success is the worker's readiness.
    let lifecycle: WorkerLifecycle
    let database: DatabaseReporter
    let tokensSent: TokenCount
    let metrics: WorkerMetrics
    let logger: Logger

    func run() async {
        let scheduling = self.scheduling
        _ = await withGracefulShutdownHandler {
            await scheduling.withinGracePeriod { await writeUntilSettled() }
        } onGracefulShutdown: {
            // Wakes the loop to see whether anything is left to write.
            scheduling.wakeWriter()
        }
        let settled = scheduling.decide(\.writesSettled)
        if !settled { scheduling.perform(scheduling.decide { $0.graceEnded() }) }
    }

    private func writeUntilSettled() async {
        var failures = 0
        for await batch in scheduling.writes {
            if !batch.isEmpty {
                failures = await write(batch, failuresSoFar: failures)
            }
            if Task.isShuttingDownGracefully, scheduling.decide(\.writesSettled) { return }
        }
    }

    /// Writes one batch; returns the failures in a row after it.
    private func write(_ batch: [ChunkCompletion], failuresSoFar: Int) async -> Int {
        let started = ContinuousClock.now
        do {
            let report = try await store.complete(batch)
            lifecycle.written(batch.map(\.chunk.id))
            metrics.completionDuration.record(duration: ContinuousClock.now - started)
            let sent = batch.reduce(0) { total, completion in
                report.leaseLost.contains(completion.chunk.id) ? total : total + completion.outcomes.count { $0.status != 0 }
            }
            tokensSent.add(sent)
            for chunk in report.leaseLost {
                metrics.leasesLost.increment()
                logger.warning("lease lost; another worker records this chunk", metadata: ["chunk": "\(chunk)"])
            }
            database.answered()
            if failuresSoFar > 0 {
                lifecycle.databaseTookWrite(true)
                logger.info("database is back; results written", metadata: ["completions": "\(batch.count)"])
            }
            let (actions, unwritten) = scheduling.decide { ($0.writeSucceeded(), $0.unwrittenCount) }
            metrics.unwrittenResults.record(unwritten)
            scheduling.perform(actions)
            return 0
        } catch {
            let failures = failuresSoFar + 1
            let unwritten = scheduling.decide { machine -> Int in
                _ = machine.writeFailed()
                return machine.unwrittenCount
            }
            metrics.unwrittenResults.record(unwritten)
            lifecycle.databaseTookWrite(false)
            database.report(error, "writing results failed; keeping them and retrying", metadata: [
                "completions": "\(unwritten)", "attempt": "\(failures)",
            ])
            try? await Task.sleep(for: RetryBackoff.after(failures))
            scheduling.perform(scheduling.decide { $0.retryWrite() })
            return failures
        }
    }
}

/// The notifications this worker sent whose results were written (the log line at its end).
final class TokenCount: Sendable {
    private let count = Atomic<Int>(0)

    init() {}

    func add(_ tokens: Int) { count.add(tokens, ordering: .relaxed) }

    var value: Int { count.load(ordering: .relaxed) }
}
