import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import PGPushCore
import Synchronization

/// One TLS + HTTP/2 channel to a provider. It only moves bytes: the pool decides, through the connection's
/// ``HTTP2ConnectionStateMachine``, when a stream may open and what a stream's end means.
///
/// Requests are queued and opened in batches on the event loop, one flush per batch: at tens of thousands
/// of requests per second a flush per request would cost a TLS record and a write syscall each.
final class HTTP2Connection: Sendable {
    let id: Int
    let channel: any Channel
    /// The handler that speaks HTTP/2 for the channel: NIO's stream dispatcher or the nghttp2 session.
    private let engine: NIOLoopBound<any HTTP2StreamEngine>
    private let submissions = Mutex(Submissions())

    private struct Submissions {
        var pending: [HTTP2PendingStream] = []
        var drainScheduled = false
    }

    var eventLoop: any EventLoop { channel.eventLoop }

    private init(id: Int, channel: any Channel, engine: NIOLoopBound<any HTTP2StreamEngine>) {
        self.id = id
        self.channel = channel
        self.engine = engine
    }

    /// Opens TCP, then TLS (ALPN h2, full verification), then HTTP/2. Returns once TCP is up; the
    /// handshake and the server's SETTINGS follow as events through `onEvent`.
    ///
    /// With a `proxy` that does not bypass the endpoint's host (`NO_PROXY`), TCP goes to the proxy, which is
    /// asked for a tunnel with `CONNECT host:port`; once it answers 2xx, the same TLS (the endpoint's SNI and
    /// verification) runs inside the tunnel. A proxy that refuses throws ``HTTPProxyError``; every outcome is
    /// reported to the proxy's ``HTTPProxyStatus``, which logs refusals (throttled) with `logger`.
    static func connect(
        id: Int,
        endpoint: ProviderEndpoint,
        rules: any HTTP2ProviderRules,
        sslContext: NIOSSLContext,
        eventLoop: any EventLoop,
        connectTimeout: Duration,
        requestTimeout: TimeAmount,
        engine engineKind: HTTP2Engine = .nio,
        proxy: HTTPProxyConfiguration? = nil,
        logger: Logger? = nil,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) async throws -> HTTP2Connection {
        let install: @Sendable (any Channel) throws -> Void = { channel in
            try installHTTP2(
                on: channel, endpoint: endpoint, rules: rules, sslContext: sslContext, requestTimeout: requestTimeout,
                engine: engineKind, onEvent: onEvent)
        }
        let channel: any Channel
        if let proxy, proxy.tunnels(to: endpoint.host) {
            let tunnel: any Channel
            do {
                tunnel = try await HTTPConnectTunnel.open(
                    through: proxy, to: endpoint, eventLoop: eventLoop, timeout: connectTimeout
                ) { $0.channelOption(.socketOption(.tcp_nodelay), value: 1) }
            } catch let error as HTTPProxyError {
                if let logger { proxy.status.tunnelFailed(error, logger: logger) }
                throw error
            }
            if let logger { proxy.status.tunnelOpened(proxy: proxy.redactedURL, target: "\(endpoint.host):\(endpoint.port)", logger: logger) }
            do {
                try await tunnel.eventLoop.submit { try install(tunnel) }.get()
            } catch {
                tunnel.close(promise: nil)
                throw error
            }
            channel = tunnel
        } else {
            let bootstrap = ClientBootstrap(group: eventLoop)
                .connectTimeout(.nanoseconds(connectTimeout.nanosecondsInt64))
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try install(channel) }
                }
            channel = try await bootstrap.connect(host: endpoint.host, port: endpoint.port).get()
        }
        let engine = try await channel.eventLoop.submit {
            let sync = channel.pipeline.syncOperations
            let engine: any HTTP2StreamEngine =
                switch engineKind {
                case .nio: try sync.handler(type: HTTP2StreamDispatcher.self)
                case .nghttp2: try sync.handler(type: NGHTTP2StreamEngine.self)
                }
            return NIOLoopBound(engine, eventLoop: channel.eventLoop)
        }.get()
        return HTTP2Connection(id: id, channel: channel, engine: engine)
    }

    /// TLS (ALPN h2, full verification) and the HTTP/2 engine, on a channel that reaches `endpoint` (directly
    /// or through a proxy's tunnel). Runs on the channel's event loop.
    private static func installHTTP2(
        on channel: any Channel,
        endpoint: ProviderEndpoint,
        rules: any HTTP2ProviderRules,
        sslContext: NIOSSLContext,
        requestTimeout: TimeAmount,
        engine engineKind: HTTP2Engine,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) throws {
        // For an IP literal no SNI is sent and the certificate is checked against the IP SAN.
        let serverHostname: String? = endpoint.hostIsIPAddress ? nil : endpoint.host
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
        let results = HTTP2DeferredResults(eventLoop: channel.eventLoop)
        let engine: any HTTP2StreamEngine
        switch engineKind {
        case .nio:
            engine = try installNIOHTTP2(on: sync, rules: rules, results: results, onEvent: onEvent)
        case .nghttp2:
            let session = try NGHTTP2StreamEngine(rules: rules, results: results, onEvent: onEvent)
            try sync.addHandler(session)
            engine = session
        }
        let interval = HTTP2StreamDispatcher.sweepInterval(forTimeout: requestTimeout)
        let boundEngine = NIOLoopBound(engine, eventLoop: channel.eventLoop)
        let sweep = channel.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            boundEngine.value.sweepDeadlines(now: .now())
        }
        channel.closeFuture.whenComplete { _ in sweep.cancel() }
    }

    /// NIO HTTP/2's handler and pgpush's frame-level stream dispatcher after it.
    private static func installNIOHTTP2(
        on sync: ChannelPipeline.SynchronousOperations,
        rules: any HTTP2ProviderRules,
        results: HTTP2DeferredResults,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) throws -> HTTP2StreamDispatcher {
        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(parameter: .enablePush, value: 0),
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 0),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16_384),
        ]
        // Request headers are built from values validated where they enter pgpush (hex tokens, checked topics
        // and collapse ids), and of a response only :status and the provider's few headers are read, leniently; re-validating
        // every header block in both directions cost ~4 % of a request.
        connectionConfiguration.headerBlockValidation = .disabled
        // No stream multiplexer: the dispatcher speaks frames (see HTTP2StreamDispatcher).
        try sync.addHandler(NIOHTTP2Handler(mode: .client, connectionConfiguration: connectionConfiguration))
        let dispatcher = HTTP2StreamDispatcher(rules: rules, results: results, onEvent: onEvent)
        try sync.addHandler(dispatcher)
        return dispatcher
    }

    /// Queues the requests for the next batch; each one's `onResult` runs on the event loop exactly once.
    /// The caller has already reserved their stream slots.
    func startStreams(_ streams: [HTTP2PendingStream]) {
        let mustSchedule = submissions.withLock { submissions in
            submissions.pending.append(contentsOf: streams)
            defer { submissions.drainScheduled = true }
            return !submissions.drainScheduled
        }
        if mustSchedule {
            eventLoop.execute { self.openPendingStreams() }
        }
    }

    private func openPendingStreams() {
        let batch = submissions.withLock { submissions in
            submissions.drainScheduled = false
            defer { submissions.pending.removeAll(keepingCapacity: true) }
            return submissions.pending
        }
        engine.value.open(batch)
    }

    func sendPing(_ payload: UInt64) {
        if eventLoop.inEventLoop {
            engine.value.sendPing(payload)
        } else {
            eventLoop.execute { self.engine.value.sendPing(payload) }
        }
    }

    func close() {
        channel.close(promise: nil)
    }
}
