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
/// It is a ``ServiceGroup`` of small services (`Services/`): claiming and sending, the result writer, the
/// expansion, the poll tick, LISTEN, the heartbeat, the app pools, and one service per maintenance task. Every
/// scheduling decision is made by the pure ``WorkerStateMachine``; the services report what happened and carry
/// out the actions it returns. This class holds what they share.
///
/// Graceful shutdown runs the group's services down in reverse order: claiming stops and the chunks in flight
/// finish (or give back what was not sent), then the results are written within the grace period, then the
/// pools, maintenance, LISTEN and the heartbeat, which renews the leases until the end.
public final class Worker: Service, Sendable {
    public let configuration: WorkerConfiguration
    let store: any WorkerStore
    let registry: any AppSenders
    /// Runs the app pools the registry starts; nil with a sender source that runs no pools (a test's).
    let pools: PoolSupervisor?
    /// The time of day and the random numbers the chunks read.
    let runtime: WorkerRuntime
    /// Live Activity broadcast channels: made and deleted on APNs as `push.channels` asks.
    let channels: ChannelManager
    let appHealth: AppHealth
    let metrics: WorkerMetrics
    let logger: Logger
    /// Set when a graceful shutdown starts: no new request is started; what was not sent is given back.
    let stopSending = StopSignal()
    let machine: Mutex<WorkerStateMachine<ChunkCompletion>>
    let claimWake = Wake()
    let expansionWake = Wake()
    let verdictWake = Wake()
    let writes: AsyncStream<[ChunkCompletion]>
    let writeInbox: AsyncStream<[ChunkCompletion]>.Continuation
    let readiness = Atomic<Bool>(false)
    /// Jobs cancelled or failed while this worker may hold their chunks: their tokens stop going out.
    let verdicts = JobVerdicts()
    let health: Mutex<WorkerHealth>
    /// The chunks this process holds: claimed, and their completion not yet written. The heartbeat renews
    /// exactly these.
    let heldChunks = Mutex<Set<Int64>>([])
    /// Chunks the expansion claimed, for the claim service to start.
    let claimHandOff = ClaimHandOff()
    /// Whether the database takes the worker's statements, from the services' answers; throttles the log.
    let database = Mutex(DatabaseStatus())
    let tokensSent = Atomic<Int>(0)
    /// Whether this worker held the maintenance lease at its last look (the leadership task's).
    let isMaintenanceLeader = Atomic<Bool>(false)

    /// The client LISTEN uses (a direct or session-pooled URL); nil: the worker wakes by polling only.
    let listener: PostgresClient?

    /// A worker on PostgreSQL: its store and its apps' pools are built on `client`.
    ///
    /// - Parameters:
    ///   - client: every statement; may go through PgBouncer in transaction pooling.
    ///   - listener: a client for LISTEN only, on a direct or session-pooled URL, run by the caller like
    ///     `client`. Without one the worker polls every ``WorkerConfiguration/pollInterval``.
    public convenience init(
        configuration: WorkerConfiguration, client: PostgresClient, listener: PostgresClient? = nil,
        metrics: WorkerMetrics = WorkerMetrics(), logger: Logger
    ) {
        let logger = Self.logger(logger, configuration)
        let store = QueueStore(client: client, workerID: configuration.workerID, logger: logger)
        let pools = PoolSupervisor(logger: logger)
        let registry = AppRegistry(configuration: configuration, store: store, pools: pools, logger: logger)
        self.init(configuration: configuration, store: store, senders: registry, pools: pools, listener: listener,
                  metrics: metrics, runtime: .system, logger: logger)
    }

    /// A worker on any store and sender source: PGPushDispatcherTesting's in-memory store and fake pools in a
    /// test, which need no database and no socket.
    ///
    /// - Parameters:
    ///   - store: every statement the worker runs.
    ///   - senders: the apps' senders; their pools are run by whoever made them.
    ///   - runtime: the time of day and the random numbers (backoff jitter) the chunks read.
    public convenience init(
        configuration: WorkerConfiguration, store: any WorkerStore, senders: any AppSenders,
        metrics: WorkerMetrics = WorkerMetrics(), runtime: WorkerRuntime = .system, logger: Logger
    ) {
        self.init(configuration: configuration, store: store, senders: senders, pools: nil, listener: nil,
                  metrics: metrics, runtime: runtime, logger: Self.logger(logger, configuration))
    }

    init(
        configuration: WorkerConfiguration, store: any WorkerStore, senders: any AppSenders, pools: PoolSupervisor?,
        listener: PostgresClient?, metrics: WorkerMetrics, runtime: WorkerRuntime, logger: Logger
    ) {
        self.listener = listener
        self.configuration = configuration
        self.store = store
        self.pools = pools
        self.registry = senders
        self.runtime = runtime
        self.appHealth = AppHealth(threshold: configuration.pauseAfterConfigurationErrors)
        self.metrics = metrics
        self.channels = ChannelManager(configuration: configuration, store: store, registry: registry, metrics: metrics, logger: logger)
        self.logger = logger
        self.machine = Mutex(WorkerStateMachine(configuration: .init(
            scheduler: .init(capacity: configuration.capacity), gracePeriod: configuration.gracePeriod)))
        // A heartbeat goes out every heartbeatInterval; a lease's worth of failed ones means the leases are gone.
        // The claim loop wakes at least every pollInterval; a statement may hold it for QueueStore.deadline.
        self.health = Mutex(WorkerHealth(
            databaseWindow: max(configuration.lease, configuration.heartbeatInterval * 3),
            loopWindow: QueueStore.deadline * 2 + configuration.pollInterval * 3, now: .now))
        (self.writes, self.writeInbox) = AsyncStream.makeStream(of: [ChunkCompletion].self)
    }

    /// The worker's logger: every line names the worker.
    private static func logger(_ logger: Logger, _ configuration: WorkerConfiguration) -> Logger {
        var logger = logger
        logger[metadataKey: "worker"] = "\(configuration.workerID)"
        return logger
    }

    /// True while the worker can reach the database, is not draining, and reaches the providers through its
    /// HTTP proxy if it has one (`/readyz`).
    public var isReady: Bool { notReadyReason == nil }

    /// Why the worker is not ready (`/readyz`'s body), or `nil` (``WorkerReadiness``).
    public var notReadyReason: String? {
        WorkerReadiness.notReadyReason(
            databaseAnswered: readiness.load(ordering: .relaxed),
            databaseProblem: database.withLock { $0.problem.map { "\($0)" } },
            draining: stopSending.isSet,
            proxyProblem: configuration.httpsProxy?.status.problem)
    }

    /// True while the worker reaches PostgreSQL and its claim loop turns (`/healthz`).
    public var isHealthy: Bool { health.withLock { $0.isHealthy(at: .now) } }

    /// Statements this worker sent to PostgreSQL.
    public var statementsExecuted: Int { store.statementsExecuted }

    public func run() async throws {
        do {
            try await cancelWhenGracefulShutdown { try await self.registerWithRetry() }
        } catch {
            // Stopped before the database ever answered: nothing was claimed, nothing to hand back.
            logger.info("worker stopped before it registered")
            return
        }
        var group = ServiceGroupConfiguration(services: services(), logger: logger)
        // The services end within the grace period on their own; this only bounds a stuck one.
        group.maximumGracefulShutdownDuration = configuration.gracePeriod + .seconds(5)
        // The outer group's graceful shutdown reaches this one, which runs its services down in reverse order.
        try await ServiceGroup(configuration: group).run()
        await registry.shutdown()
        // Hand the maintenance leadership over at once rather than after its lease.
        try? await store.releaseMaintenanceLeadership(deadline: .seconds(2))
        // Best effort and brief: with the database down, the registry row simply ages out.
        try? await store.unregisterWorker(deadline: .seconds(2))
        logger.info("worker stopped", metadata: [
            "tokens_sent": "\(tokensSent.load(ordering: .relaxed))", "statements": "\(store.statementsExecuted)",
        ])
    }

    /// The services, in start order; graceful shutdown runs them down from the last to the first.
    func services() -> [ServiceGroupConfiguration.ServiceConfiguration] {
        var services: [any Service] = [HeartbeatService(worker: self)]
        if let listener {
            services.append(ListenService(worker: self, listener: listener, channel: .jobs))
            services.append(ListenService(worker: self, listener: listener, channel: .cancels))
        }
        services += maintenanceServices()
        if let pools { services.append(pools) }
        services += [
            VerdictWriter(worker: self), ResultWriter(worker: self), PollTicker(worker: self),
            ExpansionService(worker: self), ClaimService(worker: self),
        ]
        return services.map { .init(service: $0, successTerminationBehavior: .ignore) }
    }

    private func registerWithRetry() async throws {
        var failures = 0
        while true {
            do {
                try await store.registerWorker(hostname: ProcessInfo.processInfo.hostName, pid: Int(ProcessInfo.processInfo.processIdentifier))
                readiness.store(true, ordering: .relaxed)
                logger.info("worker registered")
                return
            } catch {
                failures += 1
                report(error, "registration failed; retrying")
                try await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// Carries out what the state machine decided.
    func perform(_ action: WorkerStateMachine<ChunkCompletion>.Action) {
        switch action {
        case .wakeClaimer: claimWake.signal()
        case .wakeExpander: expansionWake.signal()
        case .write(let batch): writeInbox.yield(batch)
        case .abandonWrites(let completions, let tokens):
            logger.error("shutdown: results could not be written within the grace period; their chunks are rescued when the lease runs out", metadata: [
                "completions": "\(completions)", "notifications": "\(tokens)",
            ])
        case .stopSending: stopSending.set()
        case .claim, .stopClaiming, .expand, .expandSmallJobs, .expandAt, .none:
            // The service that asked carries these out itself.
            break
        }
    }

    func perform(_ actions: [WorkerStateMachine<ChunkCompletion>.Action]) {
        for action in actions { perform(action) }
    }

    /// Logs a failed call: a database outage once for all services (``databaseFailed(_:)``), anything else
    /// as a warning with `message`.
    func report(_ error: any Error, _ message: @autoclosure () -> String, metadata: Logger.Metadata = [:]) {
        guard !databaseFailed(error) else { return }
        var metadata = metadata
        metadata["error"] = "\(LoggableError.describe(error))"
        logger.warning("\(message())", metadata: metadata)
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
