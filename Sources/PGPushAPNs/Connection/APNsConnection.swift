import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import PGPushCore
import Synchronization

/// One TLS + HTTP/2 channel to APNs. It only moves bytes: the pool decides, through the connection's
/// ``APNsConnectionStateMachine``, when a stream may open and what a stream's end means.
///
/// Requests are queued and opened in batches on the event loop, one flush per batch: at tens of thousands
/// of requests per second a flush per request would cost a TLS record and a write syscall each.
final class APNsConnection: Sendable {
    let id: Int
    let channel: any Channel
    private let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    private let flushBatcher: NIOLoopBound<APNsFlushBatcher>
    private let deadlines: NIOLoopBound<APNsStreamDeadlines>
    private let deferredResults: NIOLoopBound<APNsDeferredResults>
    private let submissions = Mutex(Submissions())

    private struct PendingStream {
        var headers: HPACKHeaders
        var body: [UInt8]
        var timeout: TimeAmount
        var maximumBodyBytes: Int
        var onResult: @Sendable (APNsStreamResult) -> Void
    }

    private struct Submissions {
        var pending: [PendingStream] = []
        var drainScheduled = false
    }

    var eventLoop: any EventLoop { channel.eventLoop }

    private init(
        id: Int,
        channel: any Channel,
        multiplexer: NIOHTTP2Handler.StreamMultiplexer,
        flushBatcher: NIOLoopBound<APNsFlushBatcher>,
        deadlines: NIOLoopBound<APNsStreamDeadlines>,
        deferredResults: NIOLoopBound<APNsDeferredResults>
    ) {
        self.id = id
        self.channel = channel
        self.multiplexer = multiplexer
        self.flushBatcher = flushBatcher
        self.deadlines = deadlines
        self.deferredResults = deferredResults
    }

    /// Opens TCP, then TLS (ALPN h2, full verification), then HTTP/2. Returns once TCP is up; the
    /// handshake and the server's SETTINGS follow as events through `onEvent`.
    static func connect(
        id: Int,
        endpoint: APNsEndpoint,
        sslContext: NIOSSLContext,
        eventLoop: any EventLoop,
        connectTimeout: Duration,
        requestTimeout: TimeAmount,
        onEvent: @escaping @Sendable (APNsConnectionEvent) -> Void
    ) async throws -> APNsConnection {
        // For an IP literal no SNI is sent and the certificate is checked against the IP SAN.
        let serverHostname: String? = endpoint.hostIsIPAddress ? nil : endpoint.host
        let connectionSettings: [HTTP2Setting] = [
            HTTP2Setting(parameter: .enablePush, value: 0),
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 0),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16_384),
        ]
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(.nanoseconds(connectTimeout.nanosecondsInt64))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                    try sync.addHandler(APNsFlushBatcher())
                    var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
                    // Request headers are built from values validated where they enter pgpush (hex tokens,
                    // checked topics and collapse ids), and of a response only :status and apns-id are read,
                    // leniently; re-validating every header block in both directions cost ~4 % of a request.
                    connectionConfiguration.headerBlockValidation = .disabled
                    connectionConfiguration.initialSettings = connectionSettings
                    _ = try sync.configureHTTP2Pipeline(
                        mode: .client,
                        connectionConfiguration: connectionConfiguration,
                        streamConfiguration: NIOHTTP2Handler.StreamConfiguration()
                    ) { pushed in
                        // Server push is disabled; refuse anything that arrives anyway.
                        pushed.close()
                    }
                    try sync.addHandler(APNsConnectionObserver(onEvent: onEvent))
                }
            }
        let channel = try await bootstrap.connect(host: endpoint.host, port: endpoint.port).get()
        let eventLoop = channel.eventLoop
        let (multiplexer, flushBatcher, deadlines, deferredResults) = try await eventLoop.submit {
            let sync = channel.pipeline.syncOperations
            let deadlines = APNsStreamDeadlines()
            let sweep = eventLoop.scheduleRepeatedTask(
                initialDelay: APNsStreamDeadlines.sweepInterval(forTimeout: requestTimeout),
                delay: APNsStreamDeadlines.sweepInterval(forTimeout: requestTimeout)
            ) { _ in
                deadlines.sweep(now: .now())
            }
            channel.closeFuture.whenComplete { _ in sweep.cancel() }
            return (
                try sync.handler(type: NIOHTTP2Handler.self).syncMultiplexer(),
                NIOLoopBound(try sync.handler(type: APNsFlushBatcher.self), eventLoop: eventLoop),
                NIOLoopBound(deadlines, eventLoop: eventLoop),
                NIOLoopBound(APNsDeferredResults(eventLoop: eventLoop), eventLoop: eventLoop)
            )
        }.get()
        return APNsConnection(
            id: id,
            channel: channel,
            multiplexer: multiplexer,
            flushBatcher: flushBatcher,
            deadlines: deadlines,
            deferredResults: deferredResults
        )
    }

    /// Opens a stream and writes the request; `onResult` runs on the event loop exactly once.
    /// The caller has already reserved a stream slot.
    func startStream(
        headers: HPACKHeaders,
        body: [UInt8],
        timeout: TimeAmount,
        maximumBodyBytes: Int,
        onResult: @escaping @Sendable (APNsStreamResult) -> Void
    ) {
        let pending = PendingStream(
            headers: headers, body: body, timeout: timeout, maximumBodyBytes: maximumBodyBytes, onResult: onResult
        )
        let mustSchedule = submissions.withLock { submissions in
            submissions.pending.append(pending)
            defer { submissions.drainScheduled = true }
            return !submissions.drainScheduled
        }
        if mustSchedule {
            eventLoop.execute { self.openPendingStreams() }
        }
    }

    /// Opens every queued stream with flushes held, then flushes once.
    private func openPendingStreams() {
        let batch = submissions.withLock { submissions in
            submissions.drainScheduled = false
            defer { submissions.pending.removeAll(keepingCapacity: true) }
            return submissions.pending
        }
        flushBatcher.value.batch {
            for pending in batch { open(pending) }
        }
    }

    private func open(_ pending: PendingStream) {
        let eventLoop = self.eventLoop
        let onResult = pending.onResult
        let results = deferredResults.value
        let promise = eventLoop.makePromise(of: Channel.self)
        let handlerBox = NIOLoopBound(
            APNsStreamHandler(
                headers: pending.headers,
                body: pending.body,
                timeout: pending.timeout,
                maximumBodyBytes: pending.maximumBodyBytes,
                deadlines: deadlines.value,
                onComplete: { result in results.deliver(result, to: onResult) }
            ),
            eventLoop: eventLoop
        )
        multiplexer.createStreamChannel(promise: promise) { streamChannel in
            streamChannel.eventLoop.makeCompletedFuture {
                try streamChannel.pipeline.syncOperations.addHandler(handlerBox.value)
            }
        }
        promise.futureResult.whenFailure { _ in
            // The stream never opened (the connection closed or is closing). The handler reports at most
            // once, whether or not it was ever added to a pipeline.
            handlerBox.value.failBeforeStart()
        }
    }

    func sendPing(_ payload: UInt64) {
        channel.writeAndFlush(
            HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: payload), ack: false)),
            promise: nil
        )
    }

    func close() {
        channel.close(promise: nil)
    }
}
