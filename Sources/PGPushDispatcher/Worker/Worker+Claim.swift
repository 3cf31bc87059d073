import Foundation
import Logging
import PGPushCore
import PGPushStore
import ServiceLifecycle

extension Worker {
    /// Expands due jobs and claims work sized to the free room, as the ``WorkScheduler`` decides; sleeps on
    /// NOTIFY, room freeing up, or the poll tick. Returns once shutdown has started and every chunk has
    /// finished sending.
    func claimLoop() async {
        // Discarding: a plain task group keeps every finished child until it is awaited, so a worker's memory
        // would grow with every chunk it ever sent.
        await withDiscardingTaskGroup { chunks in
            var databaseFailures = 0
            for await _ in events {
                if stop.isSet { break }
                health.withLock { $0.loopTurned(at: .now) }
                writePendingPauses()
                let throttles = registry.throttles()
                let (smallWork, smallWorkWaiting) = state.withLock { ($0.smallWorkExpanded, $0.smallWorkServed != $0.smallWorkExpanded) }
                guard let budget = scheduler.withLock({ $0.nextClaim(throttles: throttles, smallWorkWaiting: smallWorkWaiting) })
                else { continue }
                do {
                    // A claim waiting on an unreachable database must not hold the shutdown until its deadline;
                    // if one is cut short after it took chunks, their leases run out and they are rescued.
                    let claimed = try await cancelWhenGracefulShutdown { try await self.claim(budget) }
                    databaseFailures = 0
                    readiness.store(true, ordering: .relaxed)
                    databaseAnswered()
                    let full = scheduler.withLock {
                        $0.claimSucceeded(claimed.map { ($0.appID, $0.estimatedTokens) }, budget: budget)
                    }
                    // A claim that was not full took every ready small chunk there was (it takes them first).
                    if !full { state.withLock { $0.smallWorkServed = max($0.smallWorkServed, smallWork) } }
                    heldChunks.withLock { $0.formUnion(claimed.map(\.id)) }
                    for chunk in claimed {
                        chunks.addTask { await self.run(chunk) }
                    }
                    if full { wake.yield() }
                } catch {
                    scheduler.withLock { $0.claimFailed() }
                    if stop.isSet { break }
                    databaseFailures += 1
                    readiness.store(false, ordering: .relaxed)
                    if !databaseFailed(error) {
                        logger.warning("claim failed; backing off", metadata: ["error": "\(LoggableError.describe(error))"])
                    }
                    try? await Task.sleep(for: Self.backoff(databaseFailures))
                    wake.yield()
                }
            }
            scheduler.withLock { $0.startDraining() }
            // Leaving the group's scope waits for the chunks still sending.
        }
    }

    /// Runs the claim loop until it ends, or until the grace period after a shutdown is over: a chunk stuck on
    /// an unreachable database must not hold the exit. What is still held then is rescued after its lease.
    func claimLoopWithinGrace() async {
        let ended = StopSignal()
        let loop = Task {
            await self.claimLoop()
            ended.set()
        }
        while !ended.isSet {
            let graceOver = shutdownStarted.withLock { $0 }.map { ContinuousClock.now >= $0 + configuration.gracePeriod } ?? false
            if graceOver || Task.isCancelled {
                logger.warning("shutdown: chunks still sending at the end of the grace period are left to their leases")
                loop.cancel()
                return
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    private func claim(_ budget: ClaimBudget) async throws -> [ClaimedChunk] {
        let started = ContinuousClock.now
        let chunks = try await store.claimChunks(budget, lease: configuration.lease)
        if !chunks.isEmpty { metrics.claimDuration.record(duration: ContinuousClock.now - started) }
        return chunks
    }

    /// Turns due jobs into chunks, apart from claiming so that neither waits for the other: small jobs in
    /// batches, one statement each, until none is left; a broadcast's expansion is looked for at most every
    /// ``largeJobExpansionInterval``, or right after one was found. Woken by NOTIFY and the poll tick; it wakes
    /// the claim loop when it made work.
    func expansionLoop() async {
        var failures = 0
        var lastPass: ContinuousClock.Instant?
        for await _ in expansionEvents {
            if stop.isSet { break }
            // Trickling traffic NOTIFYs once per producer commit: at 500 one-user jobs a second, a pass per
            // commit planned and ran the expansion, and the claim it wakes, for one or two jobs each (11 s of
            // database CPU in 20 s). Passes at least this far apart take what arrived meanwhile in one
            // statement; a burst's passes take longer than this, so they never wait.
            if let lastPass, case let wait = Self.smallJobGathering - lastPass.duration(to: .now), wait > .zero {
                try? await Task.sleep(for: wait)
                if stop.isSet { break }
            }
            lastPass = .now
            do {
                var made = 0
                while !stop.isSet {
                    let expanded = try await store.expandDueSmallJobs(chunkSize: configuration.chunkSize, limit: Self.smallJobBatch)
                    made += expanded
                    if expanded > 0 {
                        state.withLock { $0.smallWorkExpanded += 1 }
                        wake.yield()
                    }
                    if expanded < Self.smallJobBatch { break }
                }
                let now = ContinuousClock.now
                let due = state.withLock { state -> Bool in
                    guard state.largeJobFound || state.lastLargeJobLook.map({ $0.duration(to: now) >= Self.largeJobExpansionInterval }) ?? true
                    else { return false }
                    state.lastLargeJobLook = now
                    return true
                }
                if due {
                    let expansion = try await store.expandNextDueJob(chunkSize: configuration.chunkSize, includingSmallJobs: false)
                    state.withLock { $0.largeJobFound = expansion != nil }
                    if let expansion {
                        made += 1
                        wake.yield()
                        logger.info("expanded job", metadata: [
                            "job": "\(expansion.jobID)", "app": "\(expansion.appID)", "tokens": "\(expansion.total)", "chunks": "\(expansion.chunks)",
                        ])
                        expansionWake.yield()
                    }
                }
                failures = 0
            } catch {
                // Work already expanded keeps flowing: claiming does not wait for this loop.
                if Task.isCancelled { return }
                failures += 1
                if !databaseFailed(error) {
                    logger.error("expanding jobs failed", metadata: ["error": "\(LoggableError.describe(error))"])
                }
                try? await Task.sleep(for: Self.backoff(failures))
                expansionWake.yield()
            }
        }
    }

    static let smallJobBatch = 1000
    /// The least time between two expansion passes; what a one-user job may wait for its batch at most.
    static let smallJobGathering: Duration = .milliseconds(10)
    static let largeJobExpansionInterval: Duration = .milliseconds(100)

    /// Sends one chunk and hands its completion to the result writer. If its tokens cannot be read, it retries;
    /// on shutdown it gives the chunk back instead, so a claimed chunk is never left locked and forgotten.
    private func run(_ chunk: ClaimedChunk) async {
        let small = scheduler.withLock { $0.isSmall(tokens: chunk.estimatedTokens) }
        let room = RoomReservation(tokens: chunk.estimatedTokens) { [self] tokens in
            if scheduler.withLock({ $0.finished(app: chunk.appID, tokens: tokens, small: small) }) { wake.yield() }
        }
        defer { room.releaseRest() }
        var logger = self.logger
        logger[metadataKey: "job"] = "\(chunk.jobID)"
        logger[metadataKey: "app"] = "\(chunk.appID)"
        let processor = ChunkProcessor(
            configuration: configuration, store: store, registry: registry, appHealth: appHealth, metrics: metrics,
            logger: logger, stopSending: stop)

        var failures = 0
        while true {
            do {
                let completion = try await processor.process(chunk, room: room, verdicts: verdicts)
                room.releaseRest()
                hand(completion)
                return
            } catch {
                failures += 1
                // Shutting down: give the chunk back now, briefly, rather than retry into the grace period.
                if stop.isSet {
                    heldChunks.withLock { _ = $0.remove(chunk.id) }
                    if (try? await store.release([chunk.id], deadline: .seconds(2))) == nil {
                        logger.warning("could not give the chunk back; it is rescued when its lease runs out", metadata: ["chunk": "\(chunk.id)"])
                    }
                    return
                }
                if !databaseFailed(error) {
                    logger.warning("reading the chunk failed; retrying", metadata: ["chunk": "\(chunk.id)", "error": "\(LoggableError.describe(error))"])
                }
                try? await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// Gives a completion to the scheduler, and starts a write if none is running.
    private func hand(_ completion: ChunkCompletion) {
        let records = completion.outcomes.count + completion.requeued.reduce(0) { $0 + $1.tokens.count }
        if let batch = scheduler.withLock({ $0.completed(completion, tokens: records) }) {
            startWrite(batch)
        }
    }

    /// Pauses requested by ``AppHealth`` (repeated configuration errors) and job failures (job-level errors).
    /// A write that fails while the database is down is kept and tried again on the next pass.
    func writePendingPauses() {
        for (app, reason) in appHealth.drainPauses() {
            logger.error("pausing app after repeated APNs configuration errors", metadata: ["app": "\(app)", "reason": "\(reason)"])
            Task {
                do {
                    _ = try await self.store.pauseApp(app, reason: reason)
                } catch {
                    self.logger.warning("could not write the pause yet; retrying", metadata: ["app": "\(app)"])
                    self.appHealth.retryPause(app, reason: reason)
                }
            }
        }
        let failures = verdicts.failuresToWrite()
        guard !failures.isEmpty, state.withLock({ !$0.writingJobFailures }) else { return }
        state.withLock { $0.writingJobFailures = true }
        Task {
            defer { self.state.withLock { $0.writingJobFailures = false } }
            for (job, reason) in failures {
                do {
                    try await self.store.failJob(job, reason: reason)
                    self.verdicts.written(job)
                    self.logger.error("job failed: APNs refuses its requests for every token", metadata: ["job": "\(job)", "reason": "\(reason)"])
                } catch {
                    self.logger.warning("could not record the job's failure yet; retrying", metadata: ["job": "\(job)"])
                }
            }
        }
    }
}
