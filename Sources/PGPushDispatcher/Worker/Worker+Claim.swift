import Foundation
import Logging
import PGPushCore
import PGPushStore

extension Worker {
    /// Claims while there is free capacity and nothing is waiting to be written; sleeps on NOTIFY, a chunk
    /// finishing, or the poll tick. Returns once shutdown has started and every chunk is written.
    func claimLoop() async {
        // Discarding: a plain task group keeps every finished child until it is awaited, so a worker's memory
        // would grow with every chunk it ever sent.
        await withDiscardingTaskGroup { chunks in
            var databaseFailures = 0
            for await _ in events {
                if stop.isSet { break }
                writePendingPauses()
                let (active, pendingWrites) = state.withLock { ($0.activeChunks, $0.pendingWrites) }
                // Claim nothing while results cannot be written: the buffer of outcomes stays bounded.
                guard pendingWrites == 0 else { continue }
                let free = configuration.maximumActiveChunks - active
                guard free > 0 else { continue }
                do {
                    let claimed = try await claim(limit: free)
                    databaseFailures = 0
                    readiness.store(true, ordering: .relaxed)
                    for (chunk, job) in claimed {
                        state.withLock { $0.activeChunks += 1 }
                        chunks.addTask { await self.run(chunk, job: job) }
                    }
                    // A full claim may have left more work: look again as soon as possible.
                    if claimed.count == free { wake.yield() }
                } catch {
                    databaseFailures += 1
                    readiness.store(false, ordering: .relaxed)
                    logger.warning("claim failed; backing off", metadata: ["error": "\(String(reflecting: error))"])
                    try? await Task.sleep(for: Self.backoff(databaseFailures))
                    wake.yield()
                }
            }
            // Leaving the group's scope waits for the chunks still running.
        }
    }

    private func claim(limit: Int) async throws -> [(ClaimedChunk, JobDetails)] {
        let started = ContinuousClock.now
        // Jobs become chunks first, so a new one-token job competes with broadcasts already running.
        var expansions = 0
        do {
            while expansions < 16, let expansion = try await store.expandNextDueJob(chunkSize: configuration.chunkSize) {
                expansions += 1
                logger.info("expanded job", metadata: [
                    "job": "\(expansion.jobID)", "app": "\(expansion.appID)", "tokens": "\(expansion.total)", "chunks": "\(expansion.chunks)",
                ])
            }
        } catch {
            // Work already expanded must keep flowing even if expanding a new job fails.
            logger.error("expanding a job failed", metadata: ["error": "\(String(reflecting: error))"])
        }
        let chunks = try await store.claimChunks(limit: limit, lease: configuration.lease)
        guard !chunks.isEmpty else { return [] }
        metrics.claimDuration.record(duration: ContinuousClock.now - started)
        state.withLock { if $0.firstClaim == nil { $0.firstClaim = .now } }

        let known = state.withLock { $0.jobs }
        let missing = Set(chunks.map(\.jobID)).filter { known[$0] == nil }
        if !missing.isEmpty {
            let fetched = try await store.jobDetails(Array(missing))
            state.withLock { state in
                // A bounded cache: job contents never change, but a long-lived worker sees many jobs.
                if state.jobs.count > 10_000 { state.jobs.removeAll(keepingCapacity: true) }
                state.jobs.merge(fetched) { $1 }
            }
        }
        let jobs = state.withLock { $0.jobs }
        var claimed: [(ClaimedChunk, JobDetails)] = []
        var orphans: [Int64] = []
        for chunk in chunks {
            if let job = jobs[chunk.jobID] { claimed.append((chunk, job)) } else { orphans.append(chunk.id) }
        }
        if !orphans.isEmpty { try await store.release(orphans) }
        return claimed
    }

    /// Sends one chunk and writes its completion, retrying the database until it succeeds.
    private func run(_ chunk: ClaimedChunk, job: JobDetails) async {
        defer {
            state.withLock { $0.activeChunks -= 1 }
            wake.yield()
        }
        var logger = self.logger
        logger[metadataKey: "job"] = "\(chunk.jobID)"
        logger[metadataKey: "app"] = "\(chunk.appID)"
        let processor = ChunkProcessor(
            configuration: configuration, store: store, registry: registry, appHealth: appHealth, metrics: metrics,
            logger: logger, stopSending: stop)

        var completion: ChunkCompletion?
        var failures = 0
        while completion == nil {
            do {
                completion = try await processor.process(chunk, job: job)
            } catch {
                failures += 1
                logger.warning("reading the chunk failed; retrying", metadata: ["chunk": "\(chunk.id)", "error": "\(String(reflecting: error))"])
                if stop.isSet && failures > 3 {
                    try? await store.release([chunk.id])
                    return
                }
                try? await Task.sleep(for: Self.backoff(failures))
            }
        }
        guard let completion else { return }
        await write(completion, logger: logger)
    }

    /// Writes a completion; while the database is down it keeps it (the claim loop stops claiming) and retries
    /// with backoff, so no outcome is lost.
    private func write(_ completion: ChunkCompletion, logger: Logger) async {
        var failures = 0
        while true {
            do {
                try await store.complete(completion)
                let sent = completion.outcomes.count { $0.status != 0 }
                state.withLock { state in
                    state.tokensSent += sent
                    state.lastWrite = .now
                    if failures > 0 { state.pendingWrites -= 1 }
                }
                if failures > 0 {
                    readiness.store(true, ordering: .relaxed)
                    logger.info("database is back; results written", metadata: ["chunk": "\(completion.chunk.id)"])
                }
                return
            } catch let error as LeaseLost {
                if failures > 0 { state.withLock { $0.pendingWrites -= 1 } }
                logger.warning("lease lost; another worker records this chunk", metadata: ["chunk": "\(error.chunkID)"])
                return
            } catch {
                failures += 1
                if failures == 1 {
                    state.withLock { $0.pendingWrites += 1 }
                    readiness.store(false, ordering: .relaxed)
                }
                logger.warning("writing results failed; keeping them and retrying", metadata: [
                    "chunk": "\(completion.chunk.id)", "attempt": "\(failures)", "error": "\(String(reflecting: error))",
                ])
                try? await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// Pauses requested by ``AppHealth`` (repeated configuration errors), written once each.
    func writePendingPauses() {
        let pauses = appHealth.drainPauses()
        guard !pauses.isEmpty else { return }
        for (app, reason) in pauses {
            logger.error("pausing app after repeated APNs configuration errors", metadata: ["app": "\(app)", "reason": "\(reason)"])
            Task { _ = try? await self.store.pauseApp(app, reason: reason) }
        }
    }
}
