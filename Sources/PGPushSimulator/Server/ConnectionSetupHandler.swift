import NIOCore
import NIOHTTP2
import NIOSSL
import NIOTLS

/// Waits for the TLS handshake, then builds the HTTP/2 pipeline. Only then is it known whether the client
/// presented a certificate, which decides the first SETTINGS_MAX_CONCURRENT_STREAMS.
final class ConnectionSetupHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let server: SimulatorServerContext
    private let abruptCloser: AbruptCloseHandler
    /// Decrypted bytes that arrived before the handshake event (TLS 1.3 clients send their preface with
    /// their Finished); replayed into the HTTP/2 handler once it exists.
    private var earlyReads: [NIOAny] = []

    init(server: SimulatorServerContext, abruptCloser: AbruptCloseHandler) {
        self.server = server
        self.abruptCloser = abruptCloser
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case TLSUserEvent.handshakeCompleted(let negotiatedProtocol) = event else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        guard negotiatedProtocol == "h2" else {
            context.close(promise: nil)
            return
        }
        do {
            try configureHTTP2(context: context)
        } catch {
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        earlyReads.append(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Failed handshakes (for example an untrusted client certificate) end here.
        context.close(promise: nil)
    }

    private func configureHTTP2(context: ChannelHandlerContext) throws {
        let pipeline = context.pipeline.syncOperations
        let peerCertificate = try? pipeline.nioSSL_peerCertificate()
        let certificateTopics: [String]? = peerCertificate == nil ? nil : server.configuration.certificateTopics
        let number = server.connectionCounter.wrappingAdd(1, ordering: .relaxed).newValue
        let connection = SimulatorConnection(
            server: server, channel: context.channel, abruptCloser: abruptCloser,
            certificateTopics: certificateTopics, number: number)
        server.statistics.update { $0.connectionsAccepted += 1 }

        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: SimulatorConnection.internalStreamLimit),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
        ]
        try pipeline.addHandler(AdvertisedStreamLimitRewriter(connection: connection))
        _ = try pipeline.configureHTTP2Pipeline(
            mode: .server,
            connectionConfiguration: connectionConfiguration,
            streamConfiguration: .init()
        ) { streamChannel in
            streamChannel.eventLoop.makeCompletedFuture {
                try streamChannel.pipeline.syncOperations.addHandler(SimulatorStreamHandler(connection: connection))
            }
        }
        try pipeline.addHandler(ConnectionErrorHandler(connection: connection))
        let early = earlyReads
        earlyReads = []
        for data in early { context.fireChannelRead(data) }
        if !early.isEmpty { context.fireChannelReadComplete() }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
