import Foundation
import Logging
import PGPushCore
import PGPushStore
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// `pgpush worker`: claims work sized in notifications, fans it out over the app's HTTP/2 pool, and records
/// every token's outcome in group-committed writes.
///
/// Its loops: the claim loop, the heartbeat (leases and the live-worker registry), the LISTEN wake-ups (new
/// jobs, cancels; only with a listen client), and maintenance, each step of which fails alone. What to claim, how much and when to
/// write is decided by the pure ``WorkScheduler``; the loops carry it out. On graceful shutdown it stops
/// claiming, lets the chunks in flight finish their requests, gives back what was not sent, writes every
/// result within the grace period and leaves the registry.
public final class Worker: Service, Sendable {
    public let configuration: WorkerConfiguration
    let store: QueueStore
    let registry: AppRegistry
    let appHealth: AppHealth
    let metrics: WorkerMetrics
    let logger: Logger
    let stop = StopSignal()
    let state = Mutex(LoopState())
    let events: AsyncStream<Void>
    let wake: AsyncStream<Void>.Continuation
    let expansionEvents: AsyncStream<Void>
    let expansionWake: AsyncStream<Void>.Continuation
    let readiness = Atomic<Bool>(false)
    let scheduler: Mutex<WorkScheduler<ChunkCompletion>>
    /// Jobs cancelled or failed while this worker may hold their chunks: their tokens stop going out.
    let verdicts = JobVerdicts()
    /// Set once the shutdown's grace period is over: a failing write stops retrying.
    let writesAbandoned = Atomic<Bool>(false)
    let shutdownStarted = Mutex<ContinuousClock.Instant?>(nil)
    let health: Mutex<WorkerHealth>
    /// The chunks this process holds: claimed, and their completion not yet written. The heartbeat renews
    /// exactly these.
    let heldChunks = Mutex<Set<Int64>>([])
    /// Whether the database takes the worker's statements, from the loops' answers; throttles the log.
    let database = Mutex(DatabaseStatus())

    struct LoopState {
        var tokensSent = 0
        var lastWrite: ContinuousClock.Instant?
        var largeJobFound = false
        var lastLargeJobLook: ContinuousClock.Instant?
        var writingJobFailures = false
        /// Counts expansions that made small jobs; the claim loop remembers the last one it served. While
        /// they differ, small work may be waiting for the fast lane.
        var smallWorkExpanded = 0
        var smallWorkServed = 0
    }

    /// The client LISTEN uses (a direct or session-pooled URL); nil: the worker wakes by polling only.
    let listener: PostgresClient?

    /// - Parameters:
    ///   - client: every statement; may go through PgBouncer in transaction pooling.
    ///   - listener: a client for LISTEN only, on a direct or session-pooled URL, run by the caller like
    ///     `client`. Without one the worker polls every ``WorkerConfiguration/pollInterval``.
    public init(
        configuration: WorkerConfiguration, client: PostgresClient, listener: PostgresClient? = nil,
        metrics: WorkerMetrics = WorkerMetrics(), logger: Logger
    ) {
        self.listener = listener
        var logger = logger
        logger[metadataKey: "worker"] = "\(configuration.workerID)"
        self.configuration = configuration
        self.store = QueueStore(client: client, workerID: configuration.workerID, logger: logger)
        self.registry = AppRegistry(configuration: configuration, store: store, logger: logger)
        self.appHealth = AppHealth(threshold: configuration.pauseAfterConfigurationErrors)
        self.metrics = metrics
        self.logger = logger
        self.scheduler = Mutex(WorkScheduler(configuration: .init(capacity: configuration.capacity)))
        // A heartbeat goes out every heartbeatInterval; a lease's worth of failed ones means the leases are gone.
        // The claim loop wakes at least every pollInterval; a statement may hold it for QueueStore.deadline.
        self.health = Mutex(WorkerHealth(
            databaseWindow: max(configuration.lease, configuration.heartbeatInterval * 3),
            loopWindow: QueueStore.deadline * 2 + configuration.pollInterval * 3, now: .now))
        (self.events, self.wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        (self.expansionEvents, self.expansionWake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// True while the worker can reach the database and is not draining (`/readyz`).
    public var isReady: Bool {
        readiness.load(ordering: .relaxed) && database.withLock(\.isAvailable) && !stop.isSet
    }

    /// True while the worker reaches PostgreSQL and its claim loop turns (`/healthz`).
    public var isHealthy: Bool { health.withLock { $0.isHealthy(at: .now) } }

    /// Statements this worker sent to PostgreSQL.
    public var statementsExecuted: Int { store.statementsExecuted }

    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await registerWithRetry()
            // The background loops are cancelled once the results are written, and waited for briefly: one
            // stuck waiting for a database connection that cannot be made must not hold the exit.
            let loops = BackgroundLoops()
            loops.start { await self.heartbeatLoop() }
            if let listener {
                loops.start { await self.listenLoop(listener) }
                loops.start { await self.cancelListenLoop(listener) }
            }
            loops.start { await self.maintenanceLoop() }
            loops.start { await self.ticker() }
            loops.start { await self.expansionLoop() }
            await self.claimLoopWithinGrace()
            let started = self.shutdownStarted.withLock { $0 } ?? .now
            await self.flushResults(until: started + self.configuration.gracePeriod)
            await loops.cancel(waitingAtMost: .seconds(2))
            await registry.shutdown()
            // Hand the maintenance leadership over at once rather than after its lease.
            try? await store.releaseMaintenanceLeadership(deadline: .seconds(2))
            // Best effort and brief: with the database down, the registry row simply ages out.
            try? await store.unregisterWorker(deadline: .seconds(2))
            let summary = state.withLock { $0 }
            logger.info("worker stopped", metadata: [
                "tokens_sent": "\(summary.tokensSent)", "statements": "\(store.statementsExecuted)",
            ])
        } onGracefulShutdown: {
            self.logger.info("graceful shutdown: no new claims; draining in-flight requests")
            self.shutdownStarted.withLock { $0 = $0 ?? .now }
            self.stop.set()
            self.wake.yield()
            self.expansionWake.yield()
        }
    }

    private func registerWithRetry() async throws {
        var failures = 0
        while !stop.isSet {
            do {
                try await store.registerWorker(hostname: ProcessInfo.processInfo.hostName, pid: Int(ProcessInfo.processInfo.processIdentifier))
                readiness.store(true, ordering: .relaxed)
                logger.info("worker registered")
                return
            } catch {
                failures += 1
                if !databaseFailed(error) {
                    logger.warning("registration failed; retrying", metadata: ["error": "\(LoggableError.describe(error))"])
                }
                try await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// Records a failed database call. Returns true when the error shows the database unavailable
    /// (unreachable, read-only, shutting down): then it is logged here, once per problem and at most every few
    /// seconds for all loops together, and the worker reports not ready. Other errors are the caller's to log.
    @discardableResult
    func databaseFailed(_ error: any Error) -> Bool {
        guard let problem = DatabaseProblem.of(error) else { return false }
        if let report = database.withLock({ $0.failed(problem, at: .now) }),
           case .unavailable(let problem, let since, let failures) = report {
            logger.error("database unavailable: \(problem); not ready, retrying with backoff", metadata: [
                "for_seconds": "\(Int(since.duration(to: .now).inSeconds))", "failed_calls": "\(failures)",
                "error": "\(LoggableError.describe(error))",
            ])
        }
        return true
    }

    /// Records a write that succeeded (a claim, a heartbeat, a result write: a read proves nothing, since a
    /// standby answers reads); logs the end of an outage once.
    func databaseAnswered() {
        if let report = database.withLock({ $0.succeeded(at: .now) }), case .recovered(let outage) = report {
            logger.info("database available again; ready", metadata: ["unavailable_seconds": "\(Int(outage.inSeconds))"])
        }
    }

    static func backoff(_ failures: Int) -> Duration {
        let capped = min(failures, 6)
        return .milliseconds(Int64(100 * (1 << capped)) + Int64.random(in: 0...100))
    }
}
