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
/// Use it in-process (`start()`, then `shutdown()`), or as a `Service` in a `ServiceGroup` (`run()`).
public final class APNsSimulator: Service, Sendable {
    private struct Running: @unchecked Sendable {
        // Channel and EventLoopGroup are Sendable; the struct is only marked so for the Mutex.
        var group: MultiThreadedEventLoopGroup
        var serverChannel: Channel
        var port: Int
    }

    private enum State: @unchecked Sendable {
        case idle
        case running(Running)
        case stopped
    }

    private let configuration: APNsSimulatorConfiguration
    private let logger: Logger
    private let context: SimulatorServerContext
    private let certificates: SimulatorCertificates
    private let state = Mutex<State>(.idle)
    private let connections = OpenConnections()

    /// - Parameters:
    ///   - configuration: Behaviour, faults and credentials; see ``APNsSimulatorConfiguration``.
    ///   - logger: Receives start, stop and the ledger summary.
    public init(configuration: APNsSimulatorConfiguration = .init(), logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        self.context = SimulatorServerContext(configuration: configuration)
        self.certificates = SimulatorCertificates(
            directory: configuration.certificateDirectory, extraHostnames: configuration.certificateHostnames)
    }

    /// The PEM file of the CA that signed the server certificate; clients must trust it.
    public var caCertificatePath: String { certificates.caCertificatePath }

    /// Every notification answered 200.
    public var ledger: SimulatorLedger { context.ledger }

    /// What the simulator has seen so far.
    public var statistics: SimulatorStatistics { context.statistics.snapshot }

    /// Client connections open right now (TCP accepted and not yet closed).
    public var openConnections: Int { connections.all.count }

    /// The bound port once started.
    public var port: Int? {
        state.withLock { if case .running(let running) = $0 { return running.port } else { return nil } }
    }

    /// Changes the token registry for requests that arrive from now on.
    public func updateRegistry(_ update: (inout SimulatorTokenRegistry) -> Void) {
        context.dynamic.withLock { update(&$0.registry) }
    }

    /// Changes the faults for requests that arrive from now on (latency seeds stay per connection).
    public func updateFaults(_ update: (inout SimulatorFaults) -> Void) {
        context.dynamic.withLock { update(&$0.faults) }
        context.attemptsByToken.withLock { $0.removeAll() }
    }

    /// Generates certificates if needed, binds, and returns the port. Calling it again returns the same port.
    @discardableResult
    public func start() async throws -> Int {
        if let port { return port }
        try certificates.ensureExist(force: configuration.regenerateCertificates)
        let sslContext = try makeSSLContext()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, configuration.threadCount))
        let serverContext = context
        let connections = self.connections
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let closer = AbruptCloseHandler()
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(closer)
                    try sync.addHandler(NIOSSLServerHandler(context: sslContext))
                    try sync.addHandler(ConnectionSetupHandler(server: serverContext, abruptCloser: closer))
                    let id = ObjectIdentifier(channel)
                    connections.insert(channel, id: id)
                    channel.closeFuture.whenComplete { _ in connections.remove(id: id) }
                }
            }
        let serverChannel: Channel
        do {
            serverChannel = try await bootstrap.bind(host: configuration.host, port: configuration.port).get()
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        let port = serverChannel.localAddress?.port ?? configuration.port
        let alreadyRunning: Int? = state.withLock { state in
            if case .running(let running) = state { return running.port }
            state = .running(Running(group: group, serverChannel: serverChannel, port: port))
            return nil
        }
        if let alreadyRunning {
            try? await serverChannel.close()
            try? await group.shutdownGracefully()
            return alreadyRunning
        }
        logger.info("APNs simulator listening", metadata: [
            "host": "\(configuration.host)", "port": "\(port)", "ca": "\(caCertificatePath)",
        ])
        return port
    }

    /// Serves until graceful shutdown or cancellation, then stops and logs the ledger summary.
    public func run() async throws {
        try await start()
        guard let channel = state.withLock({ state -> Channel? in
            if case .running(let running) = state { return running.serverChannel } else { return nil }
        }) else { return }
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                try? await channel.closeFuture.get()
            } onGracefulShutdown: {
                channel.close(promise: nil)
            }
        } onCancel: {
            channel.close(promise: nil)
        }
        await shutdown()
    }

    /// Stops listening, closes every connection, and logs the ledger summary. Safe to call more than once.
    public func shutdown() async {
        let running: Running? = state.withLock { state in
            guard case .running(let running) = state else { return nil }
            state = .stopped
            return running
        }
        guard let running else { return }
        try? await running.serverChannel.close()
        for channel in connections.all {
            try? await channel.close()
        }
        try? await running.group.shutdownGracefully()
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
            + "resets=\(statistics.resets) responses: \(responses)"
    }

    private func makeSSLContext() throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMFile(certificates.serverCertificatePath)
        let key = try NIOSSLPrivateKey(file: certificates.serverKeyPath, format: .pem)
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        tls.applicationProtocols = ["h2"]
        if let caFile = configuration.clientCertificateCAFile {
            tls.certificateVerification = .optionalVerification
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caFile))
        }
        return try NIOSSLContext(configuration: tls)
    }
}

/// The TCP channels currently open, so shutdown can close them.
private final class OpenConnections: Sendable {
    private let channels = Mutex<[ObjectIdentifier: Channel]>([:])

    func insert(_ channel: Channel, id: ObjectIdentifier) { channels.withLock { $0[id] = channel } }
    func remove(id: ObjectIdentifier) { _ = channels.withLock { $0.removeValue(forKey: id) } }
    var all: [Channel] { channels.withLock { Array($0.values) } }
}
