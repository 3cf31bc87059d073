import Foundation
import Logging
import NIOCore
import ServiceLifecycle

/// Firebase Cloud Messaging (HTTP v1) on loopback: the OAuth 2.0 token endpoint and `messages:send` on one
/// HTTP/2-over-TLS server (ALPN h2 only), with FCM's validation and error bodies, a token registry by prefix,
/// a live SETTINGS_MAX_CONCURRENT_STREAMS, and injectable faults. Every accepted message lands in a ledger.
///
/// It shares its TLS and HTTP/2 plumbing (listener, stream accounting, GOAWAY and reset faults, latency)
/// with ``APNsSimulator``. Use it in-process (`start()`, then `shutdown()`), or as a `Service` (`run()`).
///
/// Endpoints:
/// - `POST <tokenPath>` (default `/token`): `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<jwt>`,
///   verified with `FCMAssertionVerifier` against the trusted ``FCMSimulatorServiceAccount``s. 200
///   `{"access_token","expires_in","token_type":"Bearer"}`, or 400 `{"error":"invalid_grant",…}`.
/// - `POST /v1/projects/{project_id}/messages:send`: needs `authorization: Bearer <token>` issued here,
///   unexpired (else 401 UNAUTHENTICATED) and for an account of that project (else 403 PERMISSION_DENIED).
/// - Anything else: 404 NOT_FOUND.
public final class FCMSimulator: Service, Sendable {
    /// How the simulator differs from FCM, in one line.
    public static let differencesFromFCM = "FCM simulator differences: one host serves both the OAuth token endpoint and "
        + "messages:send; only token targets (no topic or condition); dead, mismatched, invalid and "
        + "third-party-auth tokens come from token prefixes and lists, not registrations; quotas, 429s and 503s "
        + "happen only as injected faults; validation covers notification, data, android and size only; "
        + "nothing reaches a device."

    private let configuration: FCMSimulatorConfiguration
    private let logger: Logger
    private let context: FCMSimulatorContext
    private let listener: SimulatorListener

    /// - Parameters:
    ///   - configuration: Behaviour, faults and trusted accounts; see ``FCMSimulatorConfiguration``.
    ///   - logger: Receives start, stop and the ledger summary.
    public init(configuration: FCMSimulatorConfiguration = .init(), logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        let context = FCMSimulatorContext(configuration: configuration)
        self.context = context
        self.listener = SimulatorListener(
            options: .init(host: configuration.host, port: configuration.port, threadCount: configuration.threadCount,
                           regenerateCertificates: configuration.regenerateCertificates, clientCertificateCAFile: nil),
            certificates: SimulatorCertificates(
                directory: configuration.certificateDirectory, extraHostnames: configuration.certificateHostnames)
        ) { closer in
            ConnectionSetupHandler(abruptCloser: closer) { channel, closer, _ in
                FCMSimulatorConnection(server: context, channel: channel, abruptCloser: closer,
                                       number: context.counters.nextConnectionNumber())
            }
        }
    }

    /// The PEM file of the CA that signed the server certificate; clients must trust it.
    public var caCertificatePath: String { listener.certificates.caCertificatePath }

    /// Every message answered 200 (except `validate_only` ones).
    public var ledger: FCMSimulatorLedger { context.ledger }

    /// What the simulator has seen so far.
    public var statistics: FCMSimulatorStatistics { context.statistics.snapshot }

    /// Client connections open right now (TCP accepted and not yet closed).
    public var openConnections: Int { listener.openConnections.count }

    /// The bound port once started.
    public var port: Int? { listener.port }

    /// `https://<host>:<port>` once started (`127.0.0.1` when bound to a wildcard address).
    public var endpoint: String? {
        port.map { "https://\(Self.reachableHost(configuration.host)):\($0)" }
    }

    /// The token URI service accounts should carry to use this simulator, once started.
    public var tokenURI: String? { endpoint.map { $0 + configuration.tokenPath } }

    /// The SETTINGS_MAX_CONCURRENT_STREAMS in force.
    public var streamLimit: Int { context.streamLimit }

    /// Changes SETTINGS_MAX_CONCURRENT_STREAMS now: a SETTINGS frame goes to every open connection and new
    /// connections get the new value. Until a client acknowledges the change it may still use the old limit.
    public func updateStreamLimit(_ limit: Int) {
        context.updateStreamLimit(limit)
    }

    /// Changes the token registry for requests that arrive from now on.
    public func updateRegistry(_ update: (inout FCMSimulatorTokenRegistry) -> Void) {
        context.dynamic.withLock { update(&$0.registry) }
    }

    /// Changes the faults for requests that arrive from now on (latency seeds stay per connection).
    public func updateFaults(_ update: (inout FCMSimulatorFaults) -> Void) {
        context.dynamic.withLock { update(&$0.faults) }
        context.counters.resetAttempts()
    }

    /// Generates certificates if needed, binds, and returns the port. Calling it again returns the same port.
    @discardableResult
    public func start() async throws -> Int {
        let (port, started) = try await listener.start()
        if started {
            context.boundPort.store(port, ordering: .relaxed)
            logger.info("FCM simulator listening", metadata: [
                "host": "\(configuration.host)", "port": "\(port)", "ca": "\(caCertificatePath)",
                "accounts": "\(configuration.serviceAccounts.count)",
            ])
        }
        return port
    }

    /// Serves until graceful shutdown or cancellation, then stops and logs the ledger summary.
    public func run() async throws {
        try await start()
        await listener.serve()
        await shutdown()
    }

    /// Stops listening, closes every connection, and logs the ledger summary. Safe to call more than once.
    public func shutdown() async {
        guard await listener.shutdown() else { return }
        context.ledger.flush()
        logger.info("FCM simulator stopped", metadata: ["summary": "\(summary)"])
    }

    /// One line: accepted messages, duplicates, token exchanges, and responses by status and code.
    public var summary: String {
        let statistics = self.statistics
        let responses = statistics.responses.sorted { $0.key.description < $1.key.description }
            .map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return "accepted=\(ledger.acceptedCount) duplicateTokens=\(ledger.duplicates.count) "
            + "validateOnly=\(statistics.validatedOnly) tokenExchanges=\(statistics.tokenExchangesTotal) "
            + "requests=\(statistics.requestsTotal) connections=\(statistics.connectionsAccepted) "
            + "streamLimitViolations=\(statistics.streamLimitViolations) goaways=\(statistics.goAwaysSent) "
            + "resets=\(statistics.resets) responses: \(responses)"
    }

    static func reachableHost(_ host: String) -> String {
        switch host {
        case "0.0.0.0", "::", "[::]", "": "127.0.0.1"
        case _ where host.contains(":") && !host.hasPrefix("["): "[\(host)]"
        default: host
        }
    }
}
