import ArgumentParser
import Foundation
import Logging
import Metrics
import PGPushCLISupport
import PGPushDashboard
import PGPushDispatcher
import PGPushStore
import PostgresNIO
import Prometheus
import ServiceLifecycle

/// `pgpush dashboard`: the web dashboard, read-only unless `--allow-actions`.
struct DashboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard",
        abstract: "Serve the web dashboard: apps, jobs, outcomes, pruned devices, the operator audit.",
        discussion: """
            Pages: / (overview), /apps/<id>, /jobs (filters in the URL), /jobs/<id>, /outcomes, /pruned, /audit;
            every table exports as CSV and JSON. It reads as its own database login, a member of pgpush_dashboard
            (pgpush_dashboard_actions with --allow-actions; pgpush_reader reads the views only, not enough): a login
            without it is told so at start and on every page (403, with the GRANT), and a later grant takes effect
            on the next page. A login granted some apps (push.grant_app) sees only those.

            Read-only by default: every POST is refused. --allow-actions adds POST /jobs/<id>/cancel,
            /apps/<id>/pause (form field reason) and /apps/<id>/resume, each recorded in push.operator_audit with
            the dashboard user; it requires PGPUSH_DASHBOARD_PASSWORD (HTTP Basic, user PGPUSH_DASHBOARD_USER,
            default admin). Binding beyond loopback requires the password even read-only.

            Examples:
              pgpush dashboard --database-url postgres://dash@db/push
              PGPUSH_DASHBOARD_PASSWORD=… pgpush dashboard --allow-actions --bind 0.0.0.0 --base-path /pgpush

            Exit codes: 0 stopped by SIGTERM/SIGINT, 1 runtime failure, 64 usage or configuration error.
            """)

    @OptionGroup var logging: LoggingOptions

    @Option(
        name: .customLong("database-url"),
        help: ArgumentHelp("PostgreSQL URL (env: PGPUSH_DATABASE_URL, then DATABASE_URL).", valueName: "url"))
    var databaseURL: String?

    @Option(help: "Port to listen on; 0 picks a free one (env: PGPUSH_DASHBOARD_PORT; default 8089).")
    var port: Int?

    @Option(help: "Address to listen on; beyond loopback needs PGPUSH_DASHBOARD_PASSWORD (env: PGPUSH_DASHBOARD_BIND; default 127.0.0.1).")
    var bind: String?

    @Option(help: "Path prefix of every route behind a reverse proxy, e.g. /pgpush (env: PGPUSH_DASHBOARD_BASE_PATH).")
    var basePath: String?

    @Flag(help: "Serve the POST actions (cancel, pause, resume); needs PGPUSH_DASHBOARD_PASSWORD.")
    var allowActions = false

    @Option(help: "Seconds each page's statements may run (statement_timeout; default 5).")
    var statementTimeout: Double?

    @Option(help: "Seconds one snapshot of the overview's aggregates is shared between viewers (default 2; 0 reads anew each time).")
    var overviewCache: Double?

    @Option(help: "Port for /metrics, /healthz and /readyz; -1 disables (env: PGPUSH_DASHBOARD_METRICS_PORT; default -1).")
    var metricsPort: Int?

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.dashboard")
        let environment = ProcessInfo.processInfo.environment
        guard let raw = databaseURL ?? environment["PGPUSH_DATABASE_URL"] ?? environment["DATABASE_URL"], !raw.isEmpty else {
            throw ValidationError("no database: pass --database-url or set PGPUSH_DATABASE_URL")
        }
        let url: DatabaseURL
        do {
            url = try DatabaseURL(raw)
        } catch {
            throw ValidationError(error.description)
        }
        var configuration = DashboardConfiguration()
        configuration.port = try setting(port, "PGPUSH_DASHBOARD_PORT") ?? configuration.port
        configuration.host = try setting(bind, "PGPUSH_DASHBOARD_BIND") ?? configuration.host
        configuration.basePath = try setting(basePath, "PGPUSH_DASHBOARD_BASE_PATH") ?? configuration.basePath
        configuration.allowActions = allowActions
        configuration.user = environment["PGPUSH_DASHBOARD_USER"].flatMap { $0.isEmpty ? nil : $0 } ?? configuration.user
        configuration.password = environment["PGPUSH_DASHBOARD_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
        if let statementTimeout {
            guard statementTimeout > 0 else { throw ValidationError("--statement-timeout must be positive") }
            configuration.statementTimeout = .seconds(statementTimeout)
        }
        if let overviewCache {
            guard overviewCache >= 0 else { throw ValidationError("--overview-cache must be 0 or more") }
            configuration.overviewCacheTTL = .seconds(overviewCache)
        }
        let metricsPort = try setting(metricsPort, "PGPUSH_DASHBOARD_METRICS_PORT") ?? -1

        try await checkDatabase(url, logger: logger)

        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let client = PostgresClient(
            configuration: try url.clientConfiguration(maximumConnections: configuration.databaseConnections),
            backgroundLogger: logger)
        let server: DashboardServer
        do {
            server = try DashboardServer(configuration: configuration, client: client, logger: logger)
        } catch {
            throw ValidationError(error.description)
        }
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: client)]
        if metricsPort >= 0 {
            services.append(.init(service: MetricsServer(
                host: configuration.host, port: metricsPort, registry: registry, logger: logger, isReady: { true })))
        }
        services.append(.init(service: server, successTerminationBehavior: .gracefullyShutdownGroup))
        var group = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], cancellationSignals: [], logger: logger)
        group.maximumGracefulShutdownDuration = .seconds(10)
        group.maximumCancellationDuration = .seconds(5)
        do {
            try await ServiceGroup(configuration: group).run()
        } catch let error as DashboardError {
            printError("pgpush: \(error)")
            throw ExitCode.failure
        } catch let error as MetricsServer.BindError {
            throw ValidationError(error.description)
        }
    }

    /// Connects once before listening, as the worker does: a wrong database name, user, password or TLS setting
    /// ends the command with a message saying what is wrong. An unreachable server is only reported: the pages
    /// answer 500 until it is back.
    private func checkDatabase(_ url: DatabaseURL, logger: Logger) async throws {
        do {
            let connection = try await connectToDatabase(url, logger: logger)
            try? await connection.close()
        } catch let failure as ConnectionFailure where failure.kind == .unreachable {
            printError("pgpush: warning: \(failure); the dashboard serves and its pages fail until the database answers")
        } catch let failure as ConnectionFailure {
            printError("pgpush: \(failure)")
            throw ExitCode.failure
        }
    }
}
