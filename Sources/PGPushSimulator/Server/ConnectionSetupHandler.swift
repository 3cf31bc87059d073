import NIOCore
import NIOHTTP2
import NIOSSL
import NIOTLS

/// Waits for the TLS handshake, then builds the HTTP/2 pipeline. Only then is it known whether the client
/// presented a certificate, which decides (for APNs) the first SETTINGS_MAX_CONCURRENT_STREAMS.
///
/// Shared by every simulator: `makeHandler` builds the protocol half of the connection (APNs, FCM) around a
/// transport it creates.
final class ConnectionSetupHandler<Handler: SimulatorRequestHandler>: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    /// Builds the connection's handler from its TCP channel, the abrupt closer, and whether the client
    /// presented a (verified) TLS certificate.
    typealias MakeHandler = (_ channel: Channel, _ abruptCloser: AbruptCloseHandler, _ clientCertificatePresented: Bool) -> Handler

    private let abruptCloser: AbruptCloseHandler
    private let makeHandler: MakeHandler
    /// Decrypted bytes that arrived before the handshake event (TLS 1.3 clients send their preface with
    /// their Finished); replayed into the HTTP/2 handler once it exists.
    private var earlyReads: [NIOAny] = []

    init(abruptCloser: AbruptCloseHandler, makeHandler: @escaping MakeHandler) {
        self.abruptCloser = abruptCloser
        self.makeHandler = makeHandler
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
        let handler = makeHandler(context.channel, abruptCloser, peerCertificate != nil)
        let transport = handler.transport
        transport.statistics.record(.connectionAccepted)

        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: SimulatorTransport.internalStreamLimit),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
        ]
        try pipeline.addHandler(AdvertisedStreamLimitRewriter(transport: transport))
        _ = try pipeline.configureHTTP2Pipeline(
            mode: .server,
            connectionConfiguration: connectionConfiguration,
            streamConfiguration: .init()
        ) { streamChannel in
            streamChannel.eventLoop.makeCompletedFuture {
                try streamChannel.pipeline.syncOperations.addHandler(SimulatorStreamHandler(handler: handler))
            }
        }
        try pipeline.addHandler(ConnectionErrorHandler(transport: transport))
        let early = earlyReads
        earlyReads = []
        for data in early { context.fireChannelRead(data) }
        if !early.isEmpty { context.fireChannelReadComplete() }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
