import ArgumentParser
import Foundation
import Logging
import PGPushCLISupport
import PGPushCore
import PGPushDispatcher
import PGPushStore
import PostgresNIO
import ServiceLifecycle

/// `pgpush webhook`: relays the events of `push.job_events` to an HTTP receiver, signed, at least once, in order.
struct WebhookCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook",
        abstract: "POST every job and app event (push.job_events) to a URL: signed, at least once, in order.",
        discussion: """
            Each event is one POST of JSON {"id", "app_id", "job_id", "at", "event", "body"} with the headers \
            Content-Type: application/json, X-PGPush-Event-Id: <id> and X-PGPush-Signature: sha256=<lowercase hex \
            HMAC-SHA256 of the raw body, keyed with the secret>. The secret comes from the environment variable \
            named by --secret-env; it is never logged and never stored.

            One event at a time, in id order. An answer that is not 2xx, or none within 10 s, is retried with \
            backoff (1 s doubling up to 30 s, with jitter), forever; later events wait. The cursor (the row \
            --name of push.webhook_cursors) moves after each 2xx, so after a crash at most the event in flight \
            is sent again: receivers remove duplicates by event id. A new --name starts at the newest event; \
            insert its row first to start earlier (INSERT INTO push.webhook_cursors (name) VALUES ('crm') starts \
            at the beginning). Events left out by --events and --app move the cursor too.

            New events are found by polling every second; --listen-url (a direct or session-pooled URL, never a \
            transaction pooler) lets a NOTIFY wake the relay at once. --database-url may go through PgBouncer in \
            transaction pooling. Run one relay per --name; its login needs only the pgpush_webhook role.

            Examples:
              CRM_WEBHOOK_SECRET=… pgpush webhook --database-url postgres://relay@pgbouncer:6432/push \\
                  --url https://crm.example.com/hooks/pgpush --secret-env CRM_WEBHOOK_SECRET --name crm
              pgpush webhook --url https://ops.example.com/pgpush --secret-env OPS_SECRET --name ops \\
                  --events job_failed,app_paused --app news --app shop \\
                  --listen-url postgres://relay@db.internal:5432/push

            Signals: SIGTERM or SIGINT let the POST in flight finish, save the cursor and exit 0.
            Exit codes: 0 clean shutdown, 1 runtime failure, 64 bad usage or configuration.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: ArgumentHelp("The receiver: an http:// or https:// URL. Redirects are not followed.", valueName: "url"))
    var url: String

    @Option(help: ArgumentHelp(
        "The environment variable that holds the HMAC-SHA256 secret; unset or empty is refused.", valueName: "name"))
    var secretEnv: String

    @Option(help: ArgumentHelp(
        "Comma-separated events to deliver (default all): \(WebhookConfiguration.eventNames.joined(separator: ",")).",
        valueName: "events"))
    var events: String?

    @Option(help: ArgumentHelp("Deliver only this app's events; repeat for several (default every app).", valueName: "app"))
    var app: [String] = []

    @Option(help: ArgumentHelp("This relay's name: its cursor's row in push.webhook_cursors.", valueName: "name"))
    var name: String

    @Option(help: ArgumentHelp(
        "PostgreSQL URL for LISTEN only, a direct or session-pooled one: NOTIFY wakes the relay at once (default: poll every second).",
        valueName: "url"))
    var listenUrl: String?

    @Option(help: ArgumentHelp("Extra trusted CA certificates (PEM) for an https --url; verification stays on.", valueName: "path"))
    var caFile: String?

    @Option(help: ArgumentHelp("Seconds between polls when no NOTIFY arrives (default 1).", visibility: .hidden))
    var pollInterval: Double?

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.webhook")
        let configuration = try relayConfiguration(environment: ProcessInfo.processInfo.environment)
        let url = try database.resolve()
        var listenURL: DatabaseURL?
        if let listenUrl {
            do {
                listenURL = try DatabaseURL(listenUrl)
            } catch {
                throw ValidationError("--listen-url: \(error.message)")
            }
        }
        try await checkDatabase(url, logger: logger)

        // The pools' own lines (each failed connection attempt while the server restarts) only at debug; the
        // relay says what matters about the database itself.
        var background = logger
        background.logLevel = max(logger.logLevel, .notice)
        let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: background)
        let listener = try listenURL.map {
            PostgresClient(configuration: try $0.clientConfiguration(maximumConnections: 1), backgroundLogger: background)
        }
        let relay = WebhookRelay(configuration: configuration, client: client, listener: listener, logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: client)]
        if let listener { services.append(.init(service: listener)) }
        services.append(.init(service: relay, successTerminationBehavior: .gracefullyShutdownGroup, failureTerminationBehavior: .gracefullyShutdownGroup))
        var group = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], cancellationSignals: [], logger: logger)
        // The POST in flight may take its whole timeout, then the cursor is saved.
        group.maximumGracefulShutdownDuration = configuration.requestTimeout + .seconds(10)
        group.maximumCancellationDuration = .seconds(5)
        do {
            try await ServiceGroup(configuration: group).run()
        } catch let error as PGPushError {
            printError("pgpush: \(error.message)")
            throw ExitCode.failure
        }
    }

    /// Everything but the database, checked before anything connects: a bad flag or a missing secret is a
    /// usage error (64).
    func relayConfiguration(environment: [String: String]) throws -> WebhookConfiguration {
        do {
            let receiver = try WebhookConfiguration.parseURL(url)
            let secret = try WebhookConfiguration.secret(fromVariable: secretEnv, in: environment)
            guard !name.trimmingCharacters(in: .whitespaces).isEmpty else {
                throw PGPushError(.invalidConfiguration, "--name must not be empty")
            }
            let events = try events.map(WebhookConfiguration.parseEvents)
            let apps = app.filter { !$0.isEmpty }
            guard apps.count == app.count else { throw PGPushError(.invalidConfiguration, "--app must not be empty") }
            if caFile != nil, receiver.scheme?.lowercased() != "https" {
                throw PGPushError(.invalidConfiguration, "--ca-file needs an https:// --url")
            }
            if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
                throw PGPushError(.invalidConfiguration, "--ca-file \(caFile) cannot be read")
            }
            var seen = Set<String>()
            var configuration = WebhookConfiguration(
                url: receiver, secret: secret, name: name,
                filter: WebhookEventFilter(events: events, apps: apps.isEmpty ? nil : apps.filter { seen.insert($0).inserted }),
                caFile: caFile)
            if let pollInterval {
                guard pollInterval > 0 else { throw PGPushError(.invalidConfiguration, "--poll-interval must be positive") }
                configuration.pollInterval = .seconds(pollInterval)
            }
            return configuration
        } catch let error as PGPushError {
            throw ValidationError(error.message)
        }
    }

    /// Connects once before anything starts, as the worker does: a wrong database name, user, password or TLS
    /// setting ends the relay with a message saying what is wrong; an unreachable server is only reported.
    private func checkDatabase(_ url: DatabaseURL, logger: Logger) async throws {
        do {
            let connection = try await connectToDatabase(url, logger: logger)
            try? await connection.close()
        } catch let failure as ConnectionFailure where failure.kind == .unreachable {
            printError("pgpush: warning: \(failure); the relay keeps trying until it answers")
        } catch let failure as ConnectionFailure {
            printError("pgpush: \(failure)")
            throw ExitCode.failure
        }
    }
}
