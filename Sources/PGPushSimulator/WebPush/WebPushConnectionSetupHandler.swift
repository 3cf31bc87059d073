import NIOCore
import NIOHTTP1
import NIOTLS

/// Waits for the TLS handshake, then serves the protocol ALPN chose: `h2` gets the HTTP/2 pipeline every
/// simulator uses (through a ``ConnectionSetupHandler``), anything else (`http/1.1`, or no ALPN at all) NIO's
/// HTTP/1 server codec and a ``WebPushHTTP1Handler``.
final class WebPushConnectionSetupHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let server: WebPushSimulatorContext
    private let abruptCloser: AbruptCloseHandler
    /// Decrypted bytes that arrived before the handshake event; replayed into the chosen pipeline.
    private var earlyReads: [NIOAny] = []

    init(server: WebPushSimulatorContext, abruptCloser: AbruptCloseHandler) {
        self.server = server
        self.abruptCloser = abruptCloser
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case TLSUserEvent.handshakeCompleted(let negotiatedProtocol) = event else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        do {
            if negotiatedProtocol == "h2" && !server.configuration.http1Only {
                try handOverToHTTP2(context: context, event: event)
            } else {
                try configureHTTP1(context: context, event: event)
            }
        } catch {
            context.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        earlyReads.append(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Failed handshakes end here.
        context.close(promise: nil)
    }

    /// The shared HTTP/2 setup takes over: it gets the early reads first (it keeps them until it has built the
    /// pipeline), then the handshake event.
    private func handOverToHTTP2(context: ChannelHandlerContext, event: Any) throws {
        let server = self.server
        let setup = ConnectionSetupHandler(abruptCloser: abruptCloser) { channel, closer, _ in
            WebPushHTTP2Connection(server: server, channel: channel, abruptCloser: closer,
                                   number: server.counters.nextConnectionNumber())
        }
        try context.pipeline.syncOperations.addHandler(setup, position: .after(self))
        replayEarlyReads(context: context)
        context.fireUserInboundEventTriggered(event)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    private func configureHTTP1(context: ChannelHandlerContext, event: Any) throws {
        server.statistics.update {
            $0.connectionsAccepted += 1
            $0.http1Connections += 1
        }
        let pipeline = context.pipeline.syncOperations
        try pipeline.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
        try pipeline.addHandler(WebPushHTTP1Handler(
            server: server, abruptCloser: abruptCloser, number: server.counters.nextConnectionNumber()))
        context.fireUserInboundEventTriggered(event)
        replayEarlyReads(context: context)
        pipeline.removeHandler(context: context, promise: nil)
    }

    private func replayEarlyReads(context: ChannelHandlerContext) {
        let early = earlyReads
        earlyReads = []
        for data in early { context.fireChannelRead(data) }
        if !early.isEmpty { context.fireChannelReadComplete() }
    }
}
