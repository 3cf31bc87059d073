import Foundation
import Logging
import PGPushStore

extension Worker {
    /// Starts the result writer with its first batch. One write runs at a time; completions that arrive
    /// meanwhile form the next batch, written as soon as this one returns (group commit, no timer).
    func startWrite(_ batch: [ChunkCompletion]) {
        Task { await self.writeLoop(first: batch) }
    }

    /// Writes batches until none is waiting. While the database is down it keeps them (the scheduler stops
    /// claiming) and retries with backoff, so no outcome is lost; after a shutdown's grace period it gives up,
    /// and the leases make the rest safe.
    private func writeLoop(first: [ChunkCompletion]) async {
        var batch: [ChunkCompletion]? = first
        var failures = 0
        while let current = batch {
            let started = ContinuousClock.now
            do {
                let report = try await store.complete(current)
                heldChunks.withLock { held in
                    for completion in current { held.remove(completion.chunk.id) }
                }
                metrics.completionDuration.record(duration: ContinuousClock.now - started)
                let sent = current.reduce(0) { total, completion in
                    report.leaseLost.contains(completion.chunk.id) ? total : total + completion.outcomes.count { $0.status != 0 }
                }
                state.withLock { state in
                    state.tokensSent += sent
                    state.lastWrite = .now
                }
                for chunk in report.leaseLost {
                    metrics.leasesLost.increment()
                    logger.warning("lease lost; another worker records this chunk", metadata: ["chunk": "\(chunk)"])
                }
                databaseAnswered()
                if failures > 0 {
                    readiness.store(true, ordering: .relaxed)
                    logger.info("database is back; results written", metadata: ["completions": "\(current.count)"])
                }
                failures = 0
                batch = scheduler.withLock { $0.writeSucceeded() }
                metrics.unwrittenResults.record(scheduler.withLock { $0.unwrittenCount })
                // Written results free room for claims.
                wake.yield()
            } catch {
                failures += 1
                let unwritten = scheduler.withLock { scheduler -> Int in
                    scheduler.writeFailed()
                    return scheduler.unwrittenCount
                }
                metrics.unwrittenResults.record(unwritten)
                readiness.store(false, ordering: .relaxed)
                if !databaseFailed(error) {
                    logger.warning("writing results failed; keeping them and retrying", metadata: [
                        "completions": "\(unwritten)", "attempt": "\(failures)", "error": "\(LoggableError.describe(error))",
                    ])
                }
                if writesAbandoned.load(ordering: .relaxed) { return }
                try? await Task.sleep(for: Self.backoff(failures))
                batch = scheduler.withLock { $0.nextWrite() }
            }
        }
    }

    /// Waits until every result is written, or until `deadline`; then drops what is left and logs it as counts.
    func flushResults(until deadline: ContinuousClock.Instant) async {
        while ContinuousClock.now < deadline {
            let (unwritten, batch) = scheduler.withLock { ($0.unwrittenCount, $0.nextWrite()) }
            if unwritten == 0 { return }
            // A writer that gave up after a failure leaves its batch waiting; start one again.
            if let batch { startWrite(batch) }
            try? await Task.sleep(for: .milliseconds(20))
        }
        writesAbandoned.store(true, ordering: .relaxed)
        let dropped = scheduler.withLock { $0.abandonUnwritten() }
        if dropped.completions > 0 {
            logger.error("shutdown: results could not be written within the grace period; their chunks are rescued when the lease runs out", metadata: [
                "completions": "\(dropped.completions)", "notifications": "\(dropped.tokens)",
            ])
        }
    }
}
