import Crypto
import Foundation
import Logging
import NIOCore
import PGPushCore
import ServiceLifecycle

/// A Web Push push service (RFC 8030, 8291, 8292) on loopback: it makes subscriptions whose keys it keeps,
/// decrypts every message sent to them, checks VAPID as the public push services do (and Apple's subject rule),
/// and ledgers every accepted message. TLS with the simulators' CA; HTTP/2 for clients offering `h2` in ALPN
/// and HTTP/1.1 (keep-alive, NIO's HTTP/1 codec) for the others, or HTTP/1.1 only
/// (``WebPushSimulatorConfiguration/http1Only``), so a test can have a push-service origin of each kind.
///
/// `POST /push/<id>` is the only resource; what it checks and answers is listed on
/// ``WebPushSimulatorContext/answer(_:dynamic:now:)`` and in ``differencesFromPushServices``. Use it
/// in-process (`start()`, ``makeSubscriptions(count:applicationServerKey:outcome:)``, then `shutdown()`), or as
/// a `Service` (`run()`).
public final class WebPushSimulator: Service, Sendable {
    /// How the simulator differs from the public push services, in one line.
    public static let differencesFromPushServices = "Web Push simulator differences: one resource, POST /push/<id>; "
        + "nothing is stored or delivered (an accepted message is decrypted, ledgered and dropped, so TTL and "
        + "Topic are only checked); no receipts (Prefer: respond-async) or message deletion; 401 for a VAPID token "
        + "that does not verify and 403 for one refused (aud, Apple's sub rule as BadJwtToken, another key); "
        + "gone subscriptions come from the registry and the gone/notfound id prefixes; 429, 500 and 503 happen "
        + "only as injected faults."

    private let configuration: WebPushSimulatorConfiguration
    private let logger: Logger
    private let context: WebPushSimulatorContext
    private let listener: SimulatorListener

    /// - Parameters:
    ///   - configuration: Behaviour and faults; see ``WebPushSimulatorConfiguration``.
    ///   - logger: Receives start, stop and the ledger summary.
    public init(configuration: WebPushSimulatorConfiguration = .init(), logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        let context = WebPushSimulatorContext(configuration: configuration)
        self.context = context
        var options = SimulatorListener.Options(
            host: configuration.host, port: configuration.port, threadCount: configuration.threadCount,
            regenerateCertificates: configuration.regenerateCertificates, clientCertificateCAFile: nil)
        options.applicationProtocols = configuration.applicationProtocols
        self.listener = SimulatorListener(
            options: options,
            certificates: SimulatorCertificates(
                directory: configuration.certificateDirectory, extraHostnames: configuration.certificateHostnames)
        ) { closer in
            WebPushConnectionSetupHandler(server: context, abruptCloser: closer)
        }
    }

    /// The PEM file of the CA that signed the server certificate; clients must trust it.
    public var caCertificatePath: String { listener.certificates.caCertificatePath }

    /// Every message answered 201.
    public var ledger: WebPushSimulatorLedger { context.ledger }

    /// What the simulator has seen so far.
    public var statistics: WebPushSimulatorStatistics { context.statistics.snapshot }

    /// Client connections open right now (TCP accepted and not yet closed).
    public var openConnections: Int { listener.openConnections.count }

    /// The bound port once started.
    public var port: Int? { listener.port }

    /// Whether ALPN offers `h2` (`false` for an HTTP/1.1-only simulator).
    public var offersHTTP2: Bool { !configuration.http1Only }

    /// The origin of the subscriptions' endpoints, `https://<endpointHost>:<port>`, once started: what a VAPID
    /// token's `aud` must be.
    public var origin: WebPushOrigin? {
        port.flatMap { try? WebPushOrigin(host: endpointHost, port: $0) }
    }

    private var endpointHost: String {
        configuration.endpointHost ?? FCMSimulator.reachableHost(configuration.host)
    }

    /// Subscriptions made so far.
    public var subscriptionCount: Int { context.subscriptionCount }

    /// Changes the registry (which ids are gone) for requests that arrive from now on.
    public func updateRegistry(_ update: (inout WebPushSimulatorRegistry) -> Void) {
        context.dynamic.withLock { update(&$0.registry) }
    }

    /// Marks a subscription (by id or endpoint) gone (410), not found (404), or live again.
    public func mark(_ idOrEndpoint: String, _ outcome: WebPushSimulatorRegistry.Outcome) {
        let id = idOrEndpoint.split(separator: "/").last.map(String.init) ?? idOrEndpoint
        updateRegistry { $0.mark(id, outcome) }
    }

    /// Changes the faults for requests that arrive from now on (latency seeds stay per connection); the
    /// per-subscription attempt counts start again.
    public func updateFaults(_ update: (inout WebPushSimulatorFaults) -> Void) {
        context.dynamic.withLock { update(&$0.faults) }
        context.counters.resetAttempts()
    }

    /// Generates certificates if needed, binds, and returns the port. Calling it again returns the same port.
    @discardableResult
    public func start() async throws -> Int {
        let (port, started) = try await listener.start()
        if started {
            logger.info("Web Push simulator listening", metadata: [
                "host": "\(configuration.host)", "port": "\(port)", "ca": "\(caCertificatePath)",
                "alpn": "\(configuration.applicationProtocols.joined(separator: ","))",
            ])
        }
        return port
    }

    /// Makes `count` subscriptions on this server, as browsers would: each a fresh P-256 key pair and 16-byte
    /// auth secret with an endpoint `https://<host>:<port>/push/<opaque id>`. The simulator keeps their keys to
    /// decrypt what is sent to them.
    ///
    /// - Parameters:
    ///   - applicationServerKey: The VAPID public key (base64url) passed to `subscribe`; the subscriptions then
    ///     refuse pushes signed with another key (403). `nil` accepts any key.
    ///   - outcome: `.gone` or `.notFound` makes subscriptions answered 410 or 404; their ids start with the
    ///     registry's prefix (`gone-…`, `notfound-…`), so a sender in another process can tell too.
    /// - Throws: When the simulator is not started, or the key is not a valid VAPID public key.
    public func makeSubscriptions(count: Int, applicationServerKey: String? = nil,
                                  outcome: WebPushSimulatorRegistry.Outcome = .live) throws -> [WebPushSimulatorSubscription] {
        guard let origin else {
            throw WebPushError(.invalidEndpoint, field: "endpoint", "start the Web Push simulator before making subscriptions")
        }
        if let applicationServerKey { _ = try VAPIDKey.publicKey(applicationServerKey: applicationServerKey) }
        let registry = context.snapshot.registry
        let prefix = registry.idPrefix(for: outcome)
        var made: [WebPushSimulatorSubscription] = []
        made.reserveCapacity(max(0, count))
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<max(0, count) {
            var id: String
            repeat {
                id = prefix + WebPushBase64URL.encode((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
            } while outcome == .live && registry.outcome(forID: id) != .live
            let auth = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let subscription = try WebPushSimulatorSubscription(
                id: id, endpoint: origin.serialized + WebPushSimulatorContext.pushPathPrefix + id,
                privateKey: P256.KeyAgreement.PrivateKey(), auth: auth,
                applicationServerKey: applicationServerKey, outcome: outcome)
            context.keep(subscription)
            made.append(subscription)
        }
        if outcome != .live {
            updateRegistry { registry in for subscription in made { registry.mark(subscription.id, outcome) } }
        }
        return made
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
        logger.info("Web Push simulator stopped", metadata: ["summary": "\(summary)"])
    }

    /// One line: accepted messages (by HTTP version), duplicates, requests, connections and responses.
    public var summary: String {
        let statistics = self.statistics
        let responses = statistics.responses.sorted { $0.key.description < $1.key.description }
            .map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return "accepted=\(ledger.acceptedCount) (http2=\(ledger.acceptedCount(over: .http2)) "
            + "http1.1=\(ledger.acceptedCount(over: .http1_1))) duplicateMessages=\(ledger.duplicateMessages) "
            + "subscriptions=\(subscriptionCount) requests=\(statistics.requestsTotal) "
            + "connections=\(statistics.connectionsAccepted) (h2=\(statistics.http2Connections) "
            + "http1.1=\(statistics.http1Connections)) goaways=\(statistics.goAwaysSent) resets=\(statistics.resets) "
            + "responses: \(responses)"
    }
}
