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
/// It is a ``ServiceGroup`` of small services (`Services/`): claiming, sending, the result writer, the
/// expansion, the poll tick, LISTEN, the heartbeat, the app pools, and one service per maintenance task. Every
/// scheduling decision is made by the pure ``WorkerStateMachine``; the services report what happened and carry
/// out the actions it returns. This class builds the pieces they share and hands each service what it uses;
/// no service holds the worker.
///
/// Graceful shutdown runs the group's services down in reverse order: claiming stops, the chunks in flight
/// finish (or give back what was not sent), then the results are written within the grace period, then the
/// pools, maintenance, LISTEN and the heartbeat, which renews the leases until the end.
public final class Worker: Service, Sendable {
    public let configuration: WorkerConfiguration
    let store: any WorkerStore
    let registry: any AppSenders
    /// Runs the app pools the registry starts; nil with a sender source that runs no pools (a test's).
    let pools: PoolSupervisor?
    /// Live Activity broadcast channels: made and deleted on APNs as `push.channels` asks.
    let channels: ChannelManager
    let appHealth: AppHealth
    let metrics: WorkerMetrics
    let logger: Logger
    /// Shutdown state, readiness, and the chunks this process holds.
    let lifecycle = WorkerLifecycle()
    /// The state machine and what carries out its actions.
    let scheduling: WorkerScheduling
    /// Wakes the verdict writer.
    let verdictWake = Wake()
    /// Jobs cancelled or failed while this worker may hold their chunks: their tokens stop going out.
    let verdicts = JobVerdicts()
    let health: HealthMonitor
    /// Chunks on their way from the claim service and the expansion to the sender.
    let handOff = ChunkHandOff()
    /// Whether the database takes the worker's statements, from the services' answers; throttles the log.
    let database: DatabaseReporter
    let tokensSent = TokenCount()
    let leadership = MaintenanceLeadership()
    /// What the chunks are sent with.
    let sending: ChunkSending

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
        self.appHealth = AppHealth(threshold: configuration.pauseAfterConfigurationErrors)
        self.metrics = metrics
        self.channels = ChannelManager(configuration: configuration, store: store, registry: senders, metrics: metrics, logger: logger)
        self.logger = logger
        self.database = DatabaseReporter(logger: logger)
        self.scheduling = WorkerScheduling(
            WorkerStateMachine(configuration: .init(
                scheduler: .init(capacity: configuration.capacity), gracePeriod: configuration.gracePeriod)),
            lifecycle: lifecycle, logger: logger)
        // A heartbeat goes out every heartbeatInterval; a lease's worth of failed ones means the leases are gone.
        // The claim loop wakes at least every pollInterval; a statement may hold it for QueueStore.deadline.
        self.health = HealthMonitor(WorkerHealth(
            databaseWindow: max(configuration.lease, configuration.heartbeatInterval * 3),
            loopWindow: QueueStore.deadline * 2 + configuration.pollInterval * 3, now: .now))
        self.sending = ChunkSending(
            processor: ChunkProcessor(
                maximumClaims: configuration.maximumClaims, retryPolicy: configuration.retryPolicy, store: store,
                registry: senders, appHealth: appHealth, metrics: metrics, logger: logger, lifecycle: lifecycle,
                runtime: runtime),
            verdicts: verdicts, scheduling: scheduling, lifecycle: lifecycle, store: store, database: database,
            logger: logger)
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
            databaseAnswered: lifecycle.databaseTakesWrites,
            databaseProblem: database.problem.map { "\($0)" },
            draining: lifecycle.isStopping,
            proxyProblem: configuration.httpsProxy?.status.problem)
    }

    /// True while the worker reaches PostgreSQL and its claim loop turns (`/healthz`).
    public var isHealthy: Bool { health.isHealthy }

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
            "tokens_sent": "\(tokensSent.value)", "statements": "\(store.statementsExecuted)",
        ])
    }

    /// The services, in start order; graceful shutdown runs them down from the last to the first: the claim
    /// service stops claiming and sending, the sender drains the chunks in flight, then the expansion and the
    /// poll tick stop, the results are written, and the rest stop, the heartbeat last.
    ///
    /// Each service gets what it uses, and none gets the worker.
    func services() -> [ServiceGroupConfiguration.ServiceConfiguration] {
        let throttles: @Sendable () -> [String: AppThrottle] = { [registry] in registry.throttles() }
        var services: [any Service] = [HeartbeatService(
            store: store, lifecycle: lifecycle, registry: registry, health: health, database: database,
            lease: configuration.lease, interval: configuration.heartbeatInterval)]
        if let listener {
            for channel in [ListenService.Channel.jobs, .cancels] {
                services.append(ListenService(
                    listener: listener, channel: channel, store: store, expansionWake: scheduling.expansionWake,
                    verdicts: verdicts, pollInterval: configuration.pollInterval, logger: logger))
            }
        }
        services += maintenanceServices()
        if let pools { services.append(pools) }
        services += [
            VerdictWriter(store: store, wake: verdictWake, appHealth: appHealth, verdicts: verdicts, logger: logger),
            ResultWriter(store: store, scheduling: scheduling, lifecycle: lifecycle, database: database,
                         tokensSent: tokensSent, metrics: metrics, logger: logger),
            PollTicker(store: store, claimWake: scheduling.claimWake, expansionWake: scheduling.expansionWake,
                       interval: configuration.pollInterval),
            ExpansionService(store: store, throttles: throttles, scheduling: scheduling, lifecycle: lifecycle,
                             handOff: handOff, database: database, chunkSize: configuration.chunkSize,
                             lease: configuration.lease, logger: logger),
            ChunkSender(handOff: handOff, sending: sending, scheduling: scheduling, logger: logger),
            ClaimService(store: store, throttles: throttles, scheduling: scheduling, lifecycle: lifecycle,
                         handOff: handOff, database: database, health: health, verdictWake: verdictWake,
                         metrics: metrics, lease: configuration.lease, logger: logger),
        ]
        return services.map { .init(service: $0, successTerminationBehavior: .ignore) }
    }

    /// What the maintenance tasks work on.
    var maintenance: WorkerMaintenance {
        WorkerMaintenance(
            configuration: configuration, store: store, registry: registry, appHealth: appHealth, channels: channels,
            leadership: leadership, heldNotifications: { [scheduling] in scheduling.decide(\.held) }, metrics: metrics,
            logger: logger)
    }

    /// One ``MaintenanceService`` per maintenance task (``WorkerMaintenance/services(reportingTo:)``).
    func maintenanceServices() -> [any Service] {
        maintenance.services(reportingTo: database)
    }

    private func registerWithRetry() async throws {
        var failures = 0
        while true {
            do {
                try await store.registerWorker(hostname: ProcessInfo.processInfo.hostName, pid: Int(ProcessInfo.processInfo.processIdentifier))
                lifecycle.registered()
                logger.info("worker registered")
                return
            } catch {
                failures += 1
                database.report(error, "registration failed; retrying")
                try await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// The wait before retrying after `failures` failed calls in a row (``RetryBackoff``).
    static func backoff(_ failures: Int) -> Duration {
        RetryBackoff.after(failures)
    }
}

extension MaintenanceTask {
    /// The worker's maintenance tasks (``all(for:)-(WorkerMaintenance)``).
    static func all(for worker: Worker) -> [MaintenanceTask] {
        all(for: worker.maintenance)
    }
}
