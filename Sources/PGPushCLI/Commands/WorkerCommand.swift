import ArgumentParser
import Foundation
import Logging
import Metrics
import NIOCore
import PGPushCLISupport
import PGPushCore
import PGPushDispatcher
import PGPushStore
import PGPushTransport
import PostgresNIO
import Prometheus
import ServiceLifecycle

struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Claim broadcasts from PostgreSQL and send them to APNs and FCM (run as many as you like).",
        discussion: """
            Every option can also be set by the environment variable shown; a flag wins over the variable.
            Credentials always come from each app's push.apps row; --apns-endpoint and --fcm-endpoint only \
            redirect the traffic.

            Examples:
              pgpush worker --database-url postgres://pgpush_worker@db/push --credentials-dir /etc/pgpush/credentials
              pgpush worker --database-url $DATABASE_URL --apns-endpoint https://127.0.0.1:2197 \\
                            --apns-ca-file .pgpush-simulator/ca.pem
              pgpush worker --database-url $DATABASE_URL --fcm-endpoint https://127.0.0.1:2198 \\
                            --fcm-ca-file .pgpush-simulator/ca.pem
              pgpush worker --database-url $DATABASE_URL --https-proxy http://proxy.internal:3128

            Signals: SIGTERM or SIGINT stop claiming, drain in-flight requests within --grace-period, write
            every result, give the unsent rest back to the queue and exit 0.
            Exit codes: 0 clean shutdown, 1 runtime failure, 64 bad usage or configuration.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: ArgumentHelp(
        "PostgreSQL URL used only for LISTEN (new jobs, cancels): a direct or session-pooled one when --database-url goes through PgBouncer in transaction pooling; 'none' polls only (env: PGPUSH_LISTEN_DATABASE_URL; default --database-url).",
        valueName: "url"))
    var listenDatabaseUrl: String?

    @Option(help: "Send every app's traffic to this base URL, e.g. a simulator or staging relay (env: PGPUSH_APNS_ENDPOINT).")
    var apnsEndpoint: String?
    @Option(help: "Extra trusted CA certificates (PEM) for --apns-endpoint (env: PGPUSH_APNS_CA_FILE).")
    var apnsCaFile: String?
    @Option(help: "Make and delete Live Activity broadcast channels at this base URL instead of Apple's channel management hosts (ports 2195 sandbox, 2196 production) (env: PGPUSH_APNS_CHANNELS_ENDPOINT).")
    var apnsChannelsEndpoint: String?
    @Option(help: "Send channel broadcasts (/4/broadcasts/apps/...) to this base URL; default: where the app's other pushes go (env: PGPUSH_APNS_BROADCAST_ENDPOINT).")
    var apnsBroadcastEndpoint: String?
    @Option(help: "Seconds between comparisons of the active channels with APNs' all-channels (env: PGPUSH_CHANNEL_RECONCILE_INTERVAL; default 300).")
    var channelReconcileInterval: Double?
    @Option(help: "Hours after which a Live Activity update token not registered again is removed (env: PGPUSH_ACTIVITY_TOKEN_LIFETIME_HOURS; default 12).")
    var activityTokenLifetimeHours: Double?
    @Option(help: "Send FCM traffic to this base URL instead of https://fcm.googleapis.com (env: PGPUSH_FCM_ENDPOINT).")
    var fcmEndpoint: String?
    @Option(help: "Extra trusted CA certificates (PEM) for --fcm-endpoint and the service accounts' token_uri (env: PGPUSH_FCM_CA_FILE).")
    var fcmCaFile: String?
    @Option(help: ArgumentHelp(
        "An origin Web Push messages may go to besides the public push services (Google, Mozilla, Apple, Microsoft), such as https://push.example.net or https://*.push.example.net; repeatable. Endpoints come from browsers: any other origin fails its subscription with EndpointNotAllowed and is never connected to, so a subscription posted by anyone cannot point a worker into your network (env: PGPUSH_WEB_PUSH_ALLOW_ORIGINS, comma-separated).",
        valueName: "origin"))
    var webPushAllowOrigin: [String] = []
    @Option(help: "Extra trusted CA certificates (PEM) for push services, such as the simulator's (env: PGPUSH_WEB_PUSH_CA_FILE).")
    var webPushCaFile: String?
    @Option(help: ArgumentHelp(
        "Tunnel every provider connection (APNs, FCM, the FCM token endpoint, channel management) through this HTTP proxy with CONNECT: http://[user:password@]host[:port]; TLS to the provider runs inside the tunnel (env: HTTPS_PROXY, then https_proxy; hosts listed in NO_PROXY or no_proxy are reached directly).",
        valueName: "url"))
    var httpsProxy: String?
    @Option(help: "Key and certificate paths in push.apps must resolve inside this directory (env: PGPUSH_CREDENTIALS_DIR).")
    var credentialsDir: String?
    @Option(help: ArgumentHelp(
        "The HTTP/2 engine of every provider connection: nghttp2 (libnghttp2) or nio (NIO HTTP/2) (env: PGPUSH_HTTP2_ENGINE; default nghttp2).",
        valueName: "engine"))
    var http2Engine: String?
    @Option(help: "HTTP/2 connections per app (env: PGPUSH_CONNECTIONS_PER_APP; default 4).")
    var connectionsPerApp: Int?
    @Option(help: "Devices per chunk when a job is expanded (env: PGPUSH_CHUNK_SIZE; default 1000).")
    var chunkSize: Int?
    @Option(help: "Notifications held at once: in flight, waiting or claimed ahead (env: PGPUSH_MAX_IN_FLIGHT; default 2 × --connections-per-app × 250).")
    var maxInFlight: Int?
    @Option(help: ArgumentHelp("Replaced by --max-in-flight; N means N × --chunk-size notifications (env: PGPUSH_MAX_ACTIVE_CHUNKS).", visibility: .hidden))
    var maxActiveChunks: Int?
    @Option(help: "Seconds a graceful shutdown may drain in-flight requests (env: PGPUSH_GRACE_PERIOD; default 30).")
    var gracePeriod: Double?
    @Option(help: "Seconds a claim stays valid without a heartbeat (env: PGPUSH_LEASE; default 30).")
    var lease: Double?
    @Option(help: "Seconds between lease renewals (env: PGPUSH_HEARTBEAT_INTERVAL; default 10).")
    var heartbeatInterval: Double?
    @Option(help: "Seconds between polls when no NOTIFY arrives (env: PGPUSH_POLL_INTERVAL; default 1).")
    var pollInterval: Double?
    @Option(help: "Attempts per token for transient failures (env: PGPUSH_MAX_ATTEMPTS; default 8).")
    var maxAttempts: Int?
    @Option(help: "Seconds of the first retry's backoff cap (env: PGPUSH_RETRY_BASE_DELAY; default 5).")
    var retryBaseDelay: Double?
    @Option(help: "Largest retry backoff in seconds (env: PGPUSH_RETRY_MAX_DELAY; default 600).")
    var retryMaxDelay: Double?
    @Option(help: "Per-request deadline in seconds (env: PGPUSH_REQUEST_TIMEOUT; default 15).")
    var requestTimeout: Double?
    @Option(help: "APNs configuration errors tolerated before an app is paused (env: PGPUSH_PAUSE_AFTER_CONFIG_ERRORS; default 3).")
    var pauseAfterConfigErrors: Int?
    @Option(help: "Share of BadDeviceToken answers that trips the wrong-environment valve (env: PGPUSH_BAD_DEVICE_TOKEN_SHARE; default 0.2).")
    var badDeviceTokenShare: Double?
    @Option(help: "Answers a job needs before the valve can trip (env: PGPUSH_BAD_DEVICE_TOKEN_MIN_ANSWERS; default 1000).")
    var badDeviceTokenMinAnswers: Int?
    @Option(help: "FCM messages a minute per Firebase project for the whole fleet, shared by its apps: the project's quota (env: PGPUSH_FCM_QUOTA_PER_MINUTE; default 600000).")
    var fcmQuotaPerMinute: Int?
    @Option(help: "Seconds after which the fleet's provider token is refreshed (env: PGPUSH_TOKEN_REFRESH_AFTER; default 3000).")
    var tokenRefreshAfter: Double?
    @Option(help: "Seconds between maintenance passes: partitions, stuck jobs, pruning (env: PGPUSH_MAINTENANCE_INTERVAL; default 5).")
    var maintenanceInterval: Double?
    @Option(help: "Days after which finished jobs, pruning audit rows and prune candidates are removed (env: PGPUSH_RETENTION_DAYS; default 30).")
    var retentionDays: Double?
    // .unconditional: `--stale-device-days -5` reaches the check below, which says what is wrong with it.
    @Option(
        parsing: .unconditional,
        help: "Days after which a device that has not registered again is removed, audited with reason Stale; 30 to 60 follows Firebase's advice (env: PGPUSH_STALE_DEVICE_DAYS; default: off).")
    var staleDeviceDays: Double?
    @Option(help: "PostgreSQL connections this worker may open (env: PGPUSH_DB_CONNECTIONS; default 8).")
    var dbConnections: Int?
    @Option(help: "Seconds an app's APNs connections stay open with nothing to send (env: PGPUSH_IDLE_POOL_TIMEOUT; default 600).")
    var idlePoolTimeout: Double?
    @Option(help: "This worker's id in leases and the registry (env: PGPUSH_WORKER_ID; default host:pid:random).")
    var workerId: String?
    @Option(help: "Address for /metrics, /healthz and /readyz (env: PGPUSH_METRICS_HOST; default 0.0.0.0).")
    var metricsHost: String?
    // .unconditional: `--metrics-port -1` is a value, not a missing one followed by a flag.
    @Option(
        parsing: .unconditional,
        help: "Port for /metrics, /healthz and /readyz; 0 picks a free one, -1 disables (env: PGPUSH_METRICS_PORT; default 9464).")
    var metricsPort: Int?

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.worker")
        let url = try database.resolve()
        var configuration = try workerConfiguration()
        if configuration.apnsEndpointOverride == nil, configuration.apnsCAFile != nil {
            throw ValidationError("--apns-ca-file needs --apns-endpoint")
        }
        if configuration.fcmEndpointOverride == nil, configuration.fcmCAFile != nil {
            throw ValidationError("--fcm-ca-file needs --fcm-endpoint")
        }
        if let proxy = configuration.httpsProxy {
            logger.notice("provider connections go through the HTTPS proxy \(proxy.redactedURL) (CONNECT)", metadata: [
                "proxy": "\(proxy.redactedURL)", "no_proxy": "\(proxy.bypass)",
            ])
        }
        configuration.databaseConnections = max(4, configuration.databaseConnections)
        configuration.http2Engine = try http2EngineSetting() ?? configuration.http2Engine
        let port = try setting(metricsPort, "PGPUSH_METRICS_PORT") ?? 9464
        let host = try setting(metricsHost, "PGPUSH_METRICS_HOST") ?? "0.0.0.0"
        try await checkDatabase(url, logger: logger)
        let listenURL = try listenURL(default: url)
        if listenURL == nil {
            logger.notice("no LISTEN: new work is found by polling every \(configuration.pollInterval) (--poll-interval)")
        }

        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let client = PostgresClient(
            configuration: try url.clientConfiguration(maximumConnections: configuration.databaseConnections),
            backgroundLogger: logger)
        // LISTEN holds a connection per channel for the worker's life; it gets a client of its own, so that it
        // can bypass a transaction pooler and never takes a connection the statements need.
        let listener = try listenURL.map {
            PostgresClient(configuration: try $0.clientConfiguration(maximumConnections: 2), backgroundLogger: logger)
        }
        let worker = Worker(configuration: configuration, client: client, listener: listener, logger: logger)

        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: client)]
        if let listener { services.append(.init(service: listener)) }
        if port >= 0 {
            let server = MetricsServer(
                host: host, port: port, registry: registry, logger: logger, isReady: { worker.isReady },
                isHealthy: { worker.isHealthy }, notReadyReason: { worker.notReadyReason })
            services.append(.init(service: server))
        }
        services.append(.init(service: worker, successTerminationBehavior: .gracefullyShutdownGroup))
        var group = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], cancellationSignals: [], logger: logger)
        group.maximumGracefulShutdownDuration = configuration.gracePeriod + .seconds(10)
        group.maximumCancellationDuration = .seconds(5)
        do {
            try await ServiceGroup(configuration: group).run()
        } catch let error as MetricsServer.BindError {
            throw ValidationError(Self.describe(error))
        }
    }

    /// The URL LISTEN uses: `--listen-database-url`, else the database URL; nil for `none` (polling only).
    private func listenURL(default url: DatabaseURL) throws -> DatabaseURL? {
        guard let raw = try setting(listenDatabaseUrl, "PGPUSH_LISTEN_DATABASE_URL"), !raw.isEmpty else { return url }
        if raw == "none" { return nil }
        do {
            return try DatabaseURL(raw)
        } catch {
            throw ValidationError("--listen-database-url: \(error.description)")
        }
    }

    /// Connects once before anything starts, so that a wrong database name, user, password or TLS setting
    /// ends the worker with a message saying what is wrong. An unreachable server is only reported: the
    /// worker keeps trying until it answers (a fleet may start before its database).
    private func checkDatabase(_ url: DatabaseURL, logger: Logger) async throws {
        do {
            let connection = try await connectToDatabase(url, logger: logger)
            try? await connection.close()
        } catch let failure as ConnectionFailure where failure.kind == .unreachable {
            printError("pgpush: warning: \(failure); the worker keeps trying until it answers")
        } catch let failure as ConnectionFailure {
            printError("pgpush: \(failure)")
            throw ExitCode.failure
        }
    }

    /// The metrics endpoint's address could not be bound: which address, and how to choose another.
    static func describe(_ error: MetricsServer.BindError) -> String {
        let how = "choose another port with --metrics-port N, a free one with --metrics-port 0, or disable the "
            + "endpoint with --metrics-port -1 (or set PGPUSH_METRICS_PORT)"
        if let io = error.underlying as? IOError, io.errnoCode == EADDRINUSE {
            return "metrics address \(error.host):\(error.port) is already in use (another pgpush worker on this host?); \(how)"
        }
        return "cannot listen on metrics address \(error.host):\(error.port) (\(error.underlying)); \(how)"
    }

    private func workerConfiguration() throws -> WorkerConfiguration {
        var configuration = WorkerConfiguration()
        if let value = try setting(workerId, "PGPUSH_WORKER_ID") { configuration.workerID = value }
        configuration.apnsEndpointOverride = try setting(apnsEndpoint, "PGPUSH_APNS_ENDPOINT")
        configuration.apnsCAFile = try setting(apnsCaFile, "PGPUSH_APNS_CA_FILE")
        configuration.apnsChannelsEndpointOverride = try setting(apnsChannelsEndpoint, "PGPUSH_APNS_CHANNELS_ENDPOINT")
        configuration.apnsBroadcastEndpointOverride = try setting(apnsBroadcastEndpoint, "PGPUSH_APNS_BROADCAST_ENDPOINT")
        if let value = try setting(channelReconcileInterval, "PGPUSH_CHANNEL_RECONCILE_INTERVAL") {
            configuration.channelReconcileInterval = try positive(value, "--channel-reconcile-interval")
        }
        if let value = try setting(activityTokenLifetimeHours, "PGPUSH_ACTIVITY_TOKEN_LIFETIME_HOURS") {
            configuration.activityTokenLifetime = try positive(value * 3600, "--activity-token-lifetime-hours")
        }
        configuration.fcmEndpointOverride = try setting(fcmEndpoint, "PGPUSH_FCM_ENDPOINT")
        configuration.fcmCAFile = try setting(fcmCaFile, "PGPUSH_FCM_CA_FILE")
        configuration.webPushAllowedOrigins = webPushAllowOrigin.isEmpty
            ? (ProcessInfo.processInfo.environment["PGPUSH_WEB_PUSH_ALLOW_ORIGINS"] ?? "")
                .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            : webPushAllowOrigin
        do {
            _ = try WebPushOrigins(allowing: configuration.webPushAllowedOrigins)
        } catch {
            throw ValidationError("--web-push-allow-origin: \(error.message)")
        }
        configuration.webPushCAFile = try setting(webPushCaFile, "PGPUSH_WEB_PUSH_CA_FILE")
        configuration.credentialsDirectory = try setting(credentialsDir, "PGPUSH_CREDENTIALS_DIR")
        do {
            configuration.httpsProxy = try HTTPProxyConfiguration.resolve(
                flag: httpsProxy, environment: ProcessInfo.processInfo.environment)
        } catch {
            throw ValidationError(error.message)
        }
        if let value = try setting(connectionsPerApp, "PGPUSH_CONNECTIONS_PER_APP") {
            guard value >= 1 else { throw ValidationError("--connections-per-app must be at least 1") }
            configuration.connectionsPerApp = value
        }
        if let value = try setting(chunkSize, "PGPUSH_CHUNK_SIZE") {
            guard (1...100_000).contains(value) else { throw ValidationError("--chunk-size must be between 1 and 100000") }
            configuration.chunkSize = value
        }
        if let value = try setting(maxActiveChunks, "PGPUSH_MAX_ACTIVE_CHUNKS") {
            guard value >= 1 else { throw ValidationError("--max-active-chunks must be at least 1") }
            configuration.maximumInFlight = value * configuration.chunkSize
        }
        if let value = try setting(maxInFlight, "PGPUSH_MAX_IN_FLIGHT") {
            guard (1...1_000_000).contains(value) else { throw ValidationError("--max-in-flight must be between 1 and 1000000") }
            configuration.maximumInFlight = value
        }
        if let value = try setting(gracePeriod, "PGPUSH_GRACE_PERIOD") { configuration.gracePeriod = try positive(value, "--grace-period") }
        if let value = try setting(lease, "PGPUSH_LEASE") { configuration.lease = try positive(value, "--lease") }
        if let value = try setting(heartbeatInterval, "PGPUSH_HEARTBEAT_INTERVAL") {
            configuration.heartbeatInterval = try positive(value, "--heartbeat-interval")
        }
        guard configuration.heartbeatInterval < configuration.lease else {
            throw ValidationError("--heartbeat-interval must be shorter than --lease")
        }
        if let value = try setting(pollInterval, "PGPUSH_POLL_INTERVAL") { configuration.pollInterval = try positive(value, "--poll-interval") }
        if let value = try setting(maxAttempts, "PGPUSH_MAX_ATTEMPTS") {
            guard value >= 1 else { throw ValidationError("--max-attempts must be at least 1") }
            configuration.retryPolicy.maxAttempts = value
        }
        if let value = try setting(retryBaseDelay, "PGPUSH_RETRY_BASE_DELAY") {
            configuration.retryPolicy.baseDelay = try positive(value, "--retry-base-delay")
        }
        if let value = try setting(retryMaxDelay, "PGPUSH_RETRY_MAX_DELAY") {
            configuration.retryPolicy.maxDelay = try positive(value, "--retry-max-delay")
        }
        if let value = try setting(requestTimeout, "PGPUSH_REQUEST_TIMEOUT") {
            configuration.requestTimeout = try positive(value, "--request-timeout")
        }
        if let value = try setting(pauseAfterConfigErrors, "PGPUSH_PAUSE_AFTER_CONFIG_ERRORS") {
            configuration.pauseAfterConfigurationErrors = max(1, value)
        }
        if let value = try setting(badDeviceTokenShare, "PGPUSH_BAD_DEVICE_TOKEN_SHARE") {
            guard value > 0 && value <= 1 else { throw ValidationError("--bad-device-token-share must be in (0, 1]") }
            configuration.badDeviceTokenShare = value
        }
        if let value = try setting(badDeviceTokenMinAnswers, "PGPUSH_BAD_DEVICE_TOKEN_MIN_ANSWERS") {
            configuration.badDeviceTokenMinimumAnswers = max(1, value)
        }
        if let value = try setting(fcmQuotaPerMinute, "PGPUSH_FCM_QUOTA_PER_MINUTE") {
            guard value > 0 else { throw ValidationError("--fcm-quota-per-minute must be positive") }
            configuration.fcmQuotaPerMinute = value
        }
        if let value = try setting(tokenRefreshAfter, "PGPUSH_TOKEN_REFRESH_AFTER") {
            guard value > 0 else { throw ValidationError("--token-refresh-after must be positive") }
            // Shorter refreshes (for tests) lower the minimum age with them, keeping the 20/50/60 proportions.
            configuration.providerTokenPolicy = ProviderTokenRefreshPolicy(
                refreshAfter: value, minimumAge: min(20 * 60, value * 0.4), maximumAge: 60 * 60)
        }
        if let value = try setting(maintenanceInterval, "PGPUSH_MAINTENANCE_INTERVAL") {
            configuration.maintenanceInterval = try positive(value, "--maintenance-interval")
        }
        if let value = try setting(retentionDays, "PGPUSH_RETENTION_DAYS") {
            guard value > 0 else { throw ValidationError("--retention-days must be positive") }
            configuration.retention = .seconds(value * 86_400)
        }
        if let value = try setting(staleDeviceDays, "PGPUSH_STALE_DEVICE_DAYS") {
            guard value > 0, value.isFinite else {
                throw ValidationError("--stale-device-days must be a positive number of days (30 to 60 is usual), not \(String(format: "%g", value)); leave it out to keep devices until APNs or FCM reports them dead")
            }
            configuration.staleDeviceAge = .seconds(value * 86_400)
        }
        if let value = try setting(dbConnections, "PGPUSH_DB_CONNECTIONS") { configuration.databaseConnections = value }
        if let value = try setting(idlePoolTimeout, "PGPUSH_IDLE_POOL_TIMEOUT") {
            configuration.idlePoolTimeout = try positive(value, "--idle-pool-timeout")
        }
        return configuration
    }

    /// `--http2-engine`, or `PGPUSH_HTTP2_ENGINE`; `nil` when neither is given. A value that names no engine is
    /// a usage error, from the flag or the environment alike.
    private func http2EngineSetting() throws -> HTTP2Engine? {
        guard let raw = try setting(http2Engine, "PGPUSH_HTTP2_ENGINE") else { return nil }
        guard let engine = HTTP2Engine(rawValue: raw) else {
            throw ValidationError("--http2-engine must be nio or nghttp2, not \(raw)")
        }
        return engine
    }

    private func positive(_ seconds: Double, _ name: String) throws -> Duration {
        guard seconds > 0 else { throw ValidationError("\(name) must be positive") }
        return .seconds(seconds)
    }
}
