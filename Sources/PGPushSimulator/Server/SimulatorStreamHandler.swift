import NIOCore
import NIOHPACK
import NIOHTTP2

/// Answers one HTTP/2 stream synchronously on the event loop: collect HEADERS and DATA, let the connection's
/// ``SimulatorRequestHandler`` decide, respond. Shared by every simulator.
///
/// A plain handler per stream (not an async channel) keeps the simulator fast enough to benchmark a client.
final class SimulatorStreamHandler<Handler: SimulatorRequestHandler>: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let handler: Handler
    private var transport: SimulatorTransport { handler.transport }
    private var streamID = 0
    private var accepted = false
    private var requestHeaders: HPACKHeaders?
    private var body: ByteBuffer?
    private var answered = false
    private var needsFlush = false

    init(handler: Handler) {
        self.handler = handler
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let id = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)) ?? nil
        streamID = id.map { Int($0) } ?? 0
        accepted = transport.streamOpened(id: streamID)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if accepted { transport.streamClosed(id: streamID) }
        accepted = false
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard accepted else {
            if !answered {
                answered = true
                context.writeAndFlush(wrapOutboundOut(.rstStream(.refusedStream)), promise: nil)
            }
            return
        }
        guard !answered else { return }
        switch unwrapInboundIn(data) {
        case .headers(let headers):
            if requestHeaders == nil {
                requestHeaders = headers.headers
            }
            if headers.endStream { requestComplete(context: context) }
        case .data(let data):
            if case .byteBuffer(var buffer) = data.data {
                if body == nil {
                    body = buffer
                } else {
                    body!.writeBuffer(&buffer)
                }
            }
            if data.endStream { requestComplete(context: context) }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func requestComplete(context: ChannelHandlerContext) {
        answered = true
        let headers = requestHeaders ?? HPACKHeaders()
        let body = self.body ?? context.channel.allocator.buffer(capacity: 0)
        switch handler.handleRequest(streamID: streamID, headers: headers, body: body) {
        case .leaveUnanswered:
            return
        case .respond(let response, delay: nil):
            write(response, context: context)
            needsFlush = true
        case .respond(let response, delay: .some(let delay)):
            let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
                let context = loopBoundContext.value
                self.write(response, context: context)
                context.flush()
            }
        }
    }

    private func write(_ response: Handler.Response, context: ChannelHandlerContext) {
        guard !transport.dropped else { return }
        handler.write(response, streamID: streamID, context: context)
        transport.responseWritten(streamID: streamID)
    }
}
