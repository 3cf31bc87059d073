import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

/// APNs on loopback: HTTP/2 over TLS with APNs' validation, stream limits, provider-token rules and
/// injectable faults, recording every accepted notification in a ledger.
///
/// Live Activities too: the device port validates `liveactivity` pushes and takes broadcasts
/// (`POST /4/broadcasts/apps/<bundle id>`), and a second port (``channelsPort``) serves the broadcast channel
/// management API, with the same certificate and authentication. The channels live in ``channels``.
///
/// Use it in-process (`start()`, then `shutdown()`), or as a `Service` in a `ServiceGroup` (`run()`).
public final class APNsSimulator: Service, Sendable {
    private let configuration: APNsSimulatorConfiguration
    private let logger: Logger
    private let context: SimulatorServerContext
    private let listener: SimulatorListener
    /// The broadcast channel management API's listener; `nil` when ``APNsSimulatorConfiguration/channelsPort`` is.
    private let channelsListener: SimulatorListener?

    /// - Parameters:
    ///   - configuration: Behaviour, faults and credentials; see ``APNsSimulatorConfiguration``.
    ///   - logger: Receives start, stop and the ledger summary.
    public init(configuration: APNsSimulatorConfiguration = .init(), logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        let context = SimulatorServerContext(configuration: configuration)
        self.context = context
        let certificateTopics = configuration.certificateTopics
        let certificates = SimulatorCertificates(
            directory: configuration.certificateDirectory, extraHostnames: configuration.certificateHostnames)
        self.listener = SimulatorListener(
            options: .init(host: configuration.host, port: configuration.port, threadCount: configuration.threadCount,
                           regenerateCertificates: configuration.regenerateCertificates,
                           clientCertificateCAFile: configuration.clientCertificateCAFile),
            certificates: certificates
        ) { closer in
            ConnectionSetupHandler(abruptCloser: closer) { channel, closer, clientCertificatePresented in
                SimulatorConnection(
                    server: context, channel: channel, abruptCloser: closer,
                    certificateTopics: clientCertificatePresented ? certificateTopics : nil,
                    number: context.counters.nextConnectionNumber())
            }
        }
        self.channelsListener = configuration.channelsPort.map { channelsPort in
            SimulatorListener(
                // One thread: management requests are few. The device listener, started first, has already
                // made (or regenerated) the certificates both use.
                options: .init(host: configuration.host, port: channelsPort, threadCount: 1, regenerateCertificates: false,
                               clientCertificateCAFile: configuration.clientCertificateCAFile),
                certificates: certificates
            ) { closer in
                ConnectionSetupHandler(abruptCloser: closer) { channel, closer, clientCertificatePresented in
                    SimulatorChannelConnection(
                        server: context, channel: channel, abruptCloser: closer,
                        certificateTopics: clientCertificatePresented ? certificateTopics : nil,
                        number: context.counters.nextConnectionNumber())
                }
            }
        }
    }

    /// The PEM file of the CA that signed the server certificate; clients must trust it.
    public var caCertificatePath: String { listener.certificates.caCertificatePath }

    /// Every notification answered 200.
    public var ledger: SimulatorLedger { context.ledger }

    /// What the simulator has seen so far.
    public var statistics: SimulatorStatistics { context.statistics.snapshot }

    /// Client connections open right now (TCP accepted and not yet closed).
    public var openConnections: Int { listener.openConnections.count }

    /// The bound port once started.
    public var port: Int? { listener.port }

    /// The bound port of the broadcast channel management API once started; `nil` before, or when
    /// ``APNsSimulatorConfiguration/channelsPort`` is `nil`.
    public var channelsPort: Int? { channelsListener?.port }

    /// The broadcast channels, and every request the management API answered.
    public var channels: SimulatorChannels { context.channels }

    /// Every broadcast answered 200, in order.
    public var broadcastLedger: [SimulatorBroadcastEntry] { context.broadcastLedger.all }

    /// Changes the token registry for requests that arrive from now on.
    public func updateRegistry(_ update: (inout SimulatorTokenRegistry) -> Void) {
        context.dynamic.withLock { update(&$0.registry) }
    }

    /// Changes the faults for requests that arrive from now on (latency seeds stay per connection).
    public func updateFaults(_ update: (inout SimulatorFaults) -> Void) {
        context.dynamic.withLock { update(&$0.faults) }
        context.counters.resetAttempts()
    }

    /// Generates certificates if needed, binds (the channel management port too, see ``channelsPort``), and
    /// returns the device port. Calling it again returns the same port.
    @discardableResult
    public func start() async throws -> Int {
        let (port, started) = try await listener.start()
        var channelsPort: Int?
        if let channelsListener {
            do {
                channelsPort = try await channelsListener.start().port
            } catch {
                _ = await listener.shutdown()
                throw error
            }
        }
        if started {
            logger.info("APNs simulator listening", metadata: [
                "host": "\(configuration.host)", "port": "\(port)", "ca": "\(caCertificatePath)",
                "channelsPort": "\(channelsPort.map(String.init) ?? "off")",
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
        let channelsWereRunning = await channelsListener?.shutdown() ?? false
        guard await listener.shutdown() || channelsWereRunning else { return }
        context.ledger.flush()
        logger.info("APNs simulator stopped", metadata: ["summary": "\(summary)"])
    }

    /// One line: accepted notifications, duplicated tokens, and responses by status and reason.
    public var summary: String {
        let statistics = self.statistics
        let responses = statistics.responses.sorted { $0.key.description < $1.key.description }
            .map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return "accepted=\(ledger.acceptedCount) duplicateTokens=\(ledger.duplicates.count) "
            + "requests=\(statistics.requestsTotal) connections=\(statistics.connectionsAccepted) "
            + "streamLimitViolations=\(statistics.streamLimitViolations) goaways=\(statistics.goAwaysSent) "
            + "resets=\(statistics.resets) broadcasts=\(context.broadcastLedger.all.count) "
            + "channelRequests=\(context.channels.requests.count) responses: \(responses)"
    }
}
