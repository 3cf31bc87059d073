import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import PGPushCore
import ServiceLifecycle
import Synchronization

// The TLS + HTTP/2 server every simulator (APNs, FCM) stands on: the listener, the per-connection transport
// (advertised stream limit, connection-level faults, latency), and the handlers around the HTTP/2 handler.
// What a request means is left to a ``SimulatorRequestHandler``.

// MARK: Statistics the transport keeps

/// The counters every simulator's statistics carry about its transport.
protocol SimulatorTransportStatistics: Sendable {
    var requestsTotal: Int { get set }
    var maximumConcurrentStreamsObserved: Int { get set }
    var streamLimitViolations: Int { get set }
    var streamsBeyondLimitBeforeSettingsAcknowledged: Int { get set }
    var connectionsAccepted: Int { get set }
    var goAwaysSent: Int { get set }
    var goAwaysReceived: Int { get set }
    var resets: Int { get set }
}

/// Something the transport counts.
enum SimulatorTransportEvent: Sendable {
    case connectionAccepted
    case streamLimitViolation
    case streamBeyondLimitBeforeSettingsAcknowledged
    case concurrentStreams(Int)
    case goAwaySent
    /// A client's GOAWAY: it will open no new stream on this connection.
    case goAwayReceived
    /// A request dropped by the reset fault: counts as a request and a reset.
    case reset
    /// A request left unanswered by the abort-in-flight GOAWAY fault.
    case unansweredRequest
}

/// Where the transport reports ``SimulatorTransportEvent``s.
protocol SimulatorTransportRecording: Sendable {
    func record(_ event: SimulatorTransportEvent)
}

extension StatisticsRecorder: SimulatorTransportRecording where Statistics: SimulatorTransportStatistics {
    func record(_ event: SimulatorTransportEvent) {
        update { statistics in
            switch event {
            case .connectionAccepted: statistics.connectionsAccepted += 1
            case .streamLimitViolation: statistics.streamLimitViolations += 1
            case .streamBeyondLimitBeforeSettingsAcknowledged: statistics.streamsBeyondLimitBeforeSettingsAcknowledged += 1
            case .concurrentStreams(let count):
                statistics.maximumConcurrentStreamsObserved = max(statistics.maximumConcurrentStreamsObserved, count)
            case .goAwaySent: statistics.goAwaysSent += 1
            case .goAwayReceived: statistics.goAwaysReceived += 1
            case .reset:
                statistics.requestsTotal += 1
                statistics.resets += 1
            case .unansweredRequest: statistics.requestsTotal += 1
            }
        }
    }
}

// MARK: The protocol half of a connection

/// What a stream handler does with a complete request.
enum SimulatorStreamAction<Response> {
    case respond(Response, delay: TimeAmount?)
    /// The connection is being dropped by a fault: leave the stream unanswered.
    case leaveUnanswered
}

/// The protocol-specific half of one connection (APNs, FCM): decides the answer to each request and writes it.
///
/// Confined to the connection's event loop like its ``SimulatorTransport``.
protocol SimulatorRequestHandler: AnyObject, Sendable {
    associatedtype Response
    var transport: SimulatorTransport { get }
    /// Decides the answer to a complete request; may carry out connection-level faults through ``transport``.
    func handleRequest(streamID: Int, headers: HPACKHeaders, body: ByteBuffer) -> SimulatorStreamAction<Response>
    /// Writes the answer's frames (`HTTP2Frame.FramePayload`s, not flushed) and records it.
    func write(_ response: Response, streamID: Int, context: ChannelHandlerContext)
}

// MARK: The transport of one connection

/// One client connection's HTTP/2 transport: the advertised stream limit, stream accounting, connection-level
/// faults and latency.
///
/// Confined to the connection's event loop (the TCP channel and all its stream channels share it), which is
/// why it is `@unchecked Sendable`: the stream initializer closure must be `Sendable` to capture it.
final class SimulatorTransport: @unchecked Sendable {
    let channel: Channel
    let abruptCloser: AbruptCloseHandler
    let statistics: any SimulatorTransportRecording
    /// 1-based, per server.
    let number: Int

    /// The SETTINGS_MAX_CONCURRENT_STREAMS the client is told (``AdvertisedStreamLimitRewriter`` writes it).
    private(set) var advertisedLimit: Int
    private var limitIsBinding = false
    /// SETTINGS frames sent and acknowledged; the first is the HTTP/2 handler's initial one.
    private var settingsFramesSent = 1
    private var settingsFramesAcknowledged = 0
    /// Limits in force before a change the client has not acknowledged yet: until it has, it may still use them.
    private var limitsBeforeUnacknowledgedChanges: [(frame: Int, limit: Int)] = []
    private var openStreams = 0
    private var maximumOpenStreams = 0
    private(set) var highestStreamID = 0
    private var unansweredStreamIDs = Set<Int>()
    private var draining = false
    private(set) var dropped = false
    private var latencyState: UInt64

    init(channel: Channel, abruptCloser: AbruptCloseHandler, statistics: any SimulatorTransportRecording,
         number: Int, advertisedLimit: Int, latencySeed: UInt64) {
        self.channel = channel
        self.abruptCloser = abruptCloser
        self.statistics = statistics
        self.number = number
        self.advertisedLimit = advertisedLimit
        self.latencyState = FaultHash.mix(latencySeed ^ UInt64(number))
    }

    // MARK: Streams

    /// The client acknowledged a SETTINGS frame of the simulator's: from the first one on the advertised limit
    /// is binding, and each one retires the limit a change replaced.
    func settingsAcknowledged() {
        limitIsBinding = true
        settingsFramesAcknowledged += 1
        let acknowledged = settingsFramesAcknowledged
        limitsBeforeUnacknowledgedChanges.removeAll { $0.frame <= acknowledged }
    }

    /// The limit a new stream is checked against: the advertised one, or an earlier, higher one the client
    /// may not yet know has changed.
    private var enforcedLimit: Int {
        limitsBeforeUnacknowledgedChanges.reduce(advertisedLimit) { max($0, $1.limit) }
    }

    /// A stream opened; returns `false` when it exceeds the advertised limit and must be refused.
    ///
    /// Until the client has acknowledged the first SETTINGS it may not have seen the limit, and RFC 9113 lets
    /// it assume 100 streams meanwhile (NIO and nghttp2 do). Such early streams are accepted and counted as
    /// `streamsBeyondLimitBeforeSettingsAcknowledged`; later ones are refused.
    func streamOpened(id: Int) -> Bool {
        if openStreams >= enforcedLimit {
            if limitIsBinding || openStreams >= Self.limitAssumedBeforeSettings {
                statistics.record(.streamLimitViolation)
                return false
            }
            statistics.record(.streamBeyondLimitBeforeSettingsAcknowledged)
        }
        openStreams += 1
        unansweredStreamIDs.insert(id)
        highestStreamID = max(highestStreamID, id)
        if openStreams > maximumOpenStreams {
            maximumOpenStreams = openStreams
            statistics.record(.concurrentStreams(openStreams))
        }
        return true
    }

    /// An accepted stream closed.
    func streamClosed(id: Int) {
        openStreams -= 1
        unansweredStreamIDs.remove(id)
        if draining && openStreams == 0 {
            // The stream closes while its last frames are still being written: close only after flushing them.
            let channel = self.channel
            channel.eventLoop.assumeIsolated().execute {
                channel.flush()
                channel.close(promise: nil)
            }
        }
    }

    /// The stream's answer has been written.
    func responseWritten(streamID: Int) {
        unansweredStreamIDs.remove(streamID)
    }

    func connectionClosed() {
        dropped = true
    }

    // MARK: Connection-level effects

    /// Advertises a new SETTINGS_MAX_CONCURRENT_STREAMS. Streams beyond it that the client opens before
    /// acknowledging the change are still accepted up to the previous limit.
    func advertise(limit: Int, flush: Bool) {
        guard limit != advertisedLimit, !dropped else { return }
        settingsFramesSent += 1
        limitsBeforeUnacknowledgedChanges.append((settingsFramesSent, advertisedLimit))
        advertisedLimit = limit
        // The value written here is NIO's internal limit; AdvertisedStreamLimitRewriter substitutes advertisedLimit.
        let settings = HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([
            HTTP2Setting(parameter: .maxConcurrentStreams, value: Self.internalStreamLimit),
        ])))
        if flush {
            channel.writeAndFlush(settings, promise: nil)
        } else {
            channel.write(settings, promise: nil)
        }
    }

    /// What the connection-level faults do to one request.
    enum FaultDecision {
        case none
        /// The connection is being dropped: leave the request unanswered.
        case leaveUnanswered
        /// Answer, then (after deciding the answer) send a graceful GOAWAY.
        case goAwayAfterAnswer
    }

    /// Carries out the reset and abort-GOAWAY faults for the request numbered `requestNumber` server-wide.
    func connectionFault(requestNumber: Int, faults: SimulatorConnectionFaults) -> FaultDecision {
        if let every = faults.resetEveryStreams, every > 0, requestNumber % every == 0 {
            dropConnection()
            statistics.record(.reset)
            return .leaveUnanswered
        }
        if let every = faults.goAwayEveryStreams, every > 0, requestNumber % every == 0 {
            switch faults.goAwayMode {
            case .abortInFlight:
                abortWithGoAway(debugData: faults.goAwayDebugData)
                statistics.record(.unansweredRequest)
                return .leaveUnanswered
            case .noError:
                return .goAwayAfterAnswer
            }
        }
        return .none
    }

    /// GOAWAY NO_ERROR naming the highest stream received: those finish, then the connection closes.
    func gracefulGoAway() {
        guard !draining else { return }
        draining = true
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(
            lastStreamID: HTTP2StreamID(highestStreamID), errorCode: .noError, opaqueData: nil))
        channel.write(frame, promise: nil)
        statistics.record(.goAwaySent)
    }

    /// GOAWAY naming a stream below those in flight, then an abrupt close: they go unanswered.
    func abortWithGoAway(debugData: String) {
        guard !dropped else { return }
        let lowestInFlight = unansweredStreamIDs.min() ?? highestStreamID
        let lastProcessed = max(0, lowestInFlight - 2)
        dropped = true
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(
            lastStreamID: HTTP2StreamID(lastProcessed), errorCode: .noError,
            opaqueData: debugData.isEmpty ? nil : channel.allocator.buffer(string: debugData)))
        statistics.record(.goAwaySent)
        let closer = abruptCloser
        channel.writeAndFlush(frame).assumeIsolated().whenComplete { _ in closer.closeAbruptly() }
    }

    /// Closes the TCP connection without TLS close_notify or GOAWAY, like a network failure.
    func dropConnection() {
        dropped = true
        abruptCloser.closeAbruptly()
    }

    /// The delay before the next answer, drawn from this connection's seeded sequence.
    func latency(_ latency: SimulatorLatency) -> TimeAmount? {
        switch latency {
        case .none: return nil
        case .fixed(let duration): return .nanoseconds(Int64(duration.inSeconds * 1e9))
        case .uniform(let low, let high):
            latencyState = FaultHash.mix(latencyState)
            let fraction = FaultHash.unit(latencyState)
            let seconds = low.inSeconds + (high.inSeconds - low.inSeconds) * fraction
            return .nanoseconds(Int64(seconds * 1e9))
        }
    }

    /// What RFC 9113 lets a client assume before it has read the server's SETTINGS.
    static let limitAssumedBeforeSettings = 100

    /// NIO's own concurrent-stream limit: high, so that the simulator, not NIO, decides what to refuse.
    static let internalStreamLimit = 1 << 20
}

// MARK: Handlers around the HTTP/2 handler

/// Rewrites SETTINGS_MAX_CONCURRENT_STREAMS in the SETTINGS frames the HTTP/2 handler writes, so the client
/// sees the simulator's limit for its connection while NIO's own limit stays high.
///
/// NIO treats a peer exceeding the local limit as a connection error (GOAWAY PROTOCOL_ERROR); APNs refuses
/// the extra stream instead. Keeping NIO's limit high lets ``SimulatorStreamHandler`` refuse and count them.
/// Sits between the TLS handler and the HTTP/2 handler, which writes each frame as one buffer (DATA payloads
/// may follow as a separate write), so frame boundaries can be tracked by length.
final class AdvertisedStreamLimitRewriter: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private let transport: SimulatorTransport
    /// Bytes of the current frame still to come in later writes.
    private var remainingInFrame = 0

    init(transport: SimulatorTransport) {
        self.transport = transport
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var data = unwrapOutboundIn(data)
        switch data {
        case .fileRegion(let region):
            remainingInFrame = max(0, remainingInFrame - region.readableBytes)
        case .byteBuffer(var buffer):
            var offset = buffer.readerIndex
            let end = buffer.writerIndex
            if remainingInFrame > 0 {
                let skipped = min(remainingInFrame, end - offset)
                remainingInFrame -= skipped
                offset += skipped
            }
            var modified = false
            while offset + 9 <= end {
                let length = Int(buffer.getInteger(at: offset, as: UInt32.self)! >> 8)
                let type = buffer.getInteger(at: offset + 3, as: UInt8.self)!
                let flags = buffer.getInteger(at: offset + 4, as: UInt8.self)!
                let payloadStart = offset + 9
                if type == 0x4 && flags & 0x1 == 0 && payloadStart + length <= end {
                    var entry = payloadStart
                    while entry + 6 <= payloadStart + length {
                        if buffer.getInteger(at: entry, as: UInt16.self) == 0x3 {
                            buffer.setInteger(UInt32(transport.advertisedLimit), at: entry + 2)
                            modified = true
                        }
                        entry += 6
                    }
                }
                let frameEnd = payloadStart + length
                if frameEnd > end { remainingInFrame = frameEnd - end }
                offset = frameEnd
            }
            if modified { data = .byteBuffer(buffer) }
        }
        context.write(wrapOutboundOut(data), promise: promise)
    }
}

/// Sits first in the pipeline, below TLS, so the fault injector can drop a connection without a TLS
/// close_notify or GOAWAY, like a network failure.
final class AbruptCloseHandler: ChannelOutboundHandler {
    typealias OutboundIn = NIOAny
    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func closeAbruptly() {
        context?.close(mode: .all, promise: nil)
    }
}

/// Watches stream-0 frames and closes the connection on connection-level errors (stream errors only affect
/// their stream).
final class ConnectionErrorHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    private let transport: SimulatorTransport

    init(transport: SimulatorTransport) {
        self.transport = transport
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Stream-0 frames (SETTINGS, PING, GOAWAY) pass down here; SETTINGS ACKs make advertised limits binding.
        switch unwrapInboundIn(data).payload {
        case .settings(.ack): transport.settingsAcknowledged()
        case .goAway: transport.statistics.record(.goAwayReceived)
        default: break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        transport.connectionClosed()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTP2Errors.StreamError { return }
        context.close(promise: nil)
    }
}

// MARK: The listener

/// Binds, accepts TLS connections (ALPN h2 only, unless its options offer more) and hands each to a connection
/// setup handler; closes them all on shutdown. One per simulator.
final class SimulatorListener: Sendable {
    struct Options: Sendable {
        var host: String
        var port: Int
        var threadCount: Int
        var regenerateCertificates: Bool
        /// When set, TLS client certificates signed by this CA are accepted (optional verification).
        var clientCertificateCAFile: String?
        /// The ALPN protocols offered, in order of preference. APNs and FCM offer `h2` only.
        var applicationProtocols: [String] = ["h2"]
    }

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

    let options: Options
    let certificates: SimulatorCertificates
    /// Builds the handler that waits for the TLS handshake and then sets up HTTP/2 (a ``ConnectionSetupHandler``).
    private let makeSetupHandler: @Sendable (AbruptCloseHandler) -> any ChannelHandler
    private let state = Mutex<State>(.idle)
    private let connections = OpenConnections()

    init(options: Options, certificates: SimulatorCertificates,
         makeSetupHandler: @escaping @Sendable (AbruptCloseHandler) -> any ChannelHandler) {
        self.options = options
        self.certificates = certificates
        self.makeSetupHandler = makeSetupHandler
    }

    /// The bound port while running.
    var port: Int? {
        state.withLock { if case .running(let running) = $0 { return running.port } else { return nil } }
    }

    /// Client connections open right now (TCP accepted and not yet closed).
    var openConnections: [Channel] { connections.all }

    /// Generates certificates if needed and binds. `started` is `false` when it was already running (the port
    /// is then the one it already had).
    func start() async throws -> (port: Int, started: Bool) {
        if let port { return (port, false) }
        try certificates.ensureExist(force: options.regenerateCertificates)
        let sslContext = try makeSSLContext()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, options.threadCount))
        let connections = self.connections
        let makeSetupHandler = self.makeSetupHandler
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
                    try sync.addHandler(makeSetupHandler(closer))
                    let id = ObjectIdentifier(channel)
                    connections.insert(channel, id: id)
                    channel.closeFuture.whenComplete { _ in connections.remove(id: id) }
                }
            }
        let serverChannel: Channel
        do {
            serverChannel = try await bootstrap.bind(host: options.host, port: options.port).get()
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        let port = serverChannel.localAddress?.port ?? options.port
        let alreadyRunning: Int? = state.withLock { state in
            if case .running(let running) = state { return running.port }
            state = .running(Running(group: group, serverChannel: serverChannel, port: port))
            return nil
        }
        if let alreadyRunning {
            try? await serverChannel.close()
            try? await group.shutdownGracefully()
            return (alreadyRunning, false)
        }
        return (port, true)
    }

    /// Waits until the listening channel closes: on graceful shutdown, cancellation, or ``shutdown()``.
    func serve() async {
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
    }

    /// Stops listening and closes every connection. Returns `false` when it was not running.
    func shutdown() async -> Bool {
        let running: Running? = state.withLock { state in
            guard case .running(let running) = state else { return nil }
            state = .stopped
            return running
        }
        guard let running else { return false }
        try? await running.serverChannel.close()
        for channel in connections.all {
            try? await channel.close()
        }
        try? await running.group.shutdownGracefully()
        return true
    }

    private func makeSSLContext() throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMFile(certificates.serverCertificatePath)
        let key = try NIOSSLPrivateKey(file: certificates.serverKeyPath, format: .pem)
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        tls.applicationProtocols = options.applicationProtocols
        if let caFile = options.clientCertificateCAFile {
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
