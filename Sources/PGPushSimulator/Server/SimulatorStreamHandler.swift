import NIOCore
import NIOHPACK
import NIOHTTP2

/// Answers one HTTP/2 stream synchronously on the event loop: collect HEADERS and DATA, decide, respond.
///
/// A plain handler per stream (not an async channel) keeps the simulator fast enough to benchmark a client.
final class SimulatorStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let connection: SimulatorConnection
    private var streamID = 0
    private var accepted = false
    private var requestHeaders: HPACKHeaders?
    private var body: ByteBuffer?
    private var answered = false
    private var needsFlush = false

    init(connection: SimulatorConnection) {
        self.connection = connection
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let id = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)) ?? nil
        streamID = id.map { Int($0) } ?? 0
        accepted = connection.streamOpened(id: streamID)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if accepted { connection.streamClosed(id: streamID) }
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
        switch connection.handleRequest(streamID: streamID, headers: headers, body: body) {
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

    private func write(_ response: SimulatorResponse, context: ChannelHandlerContext) {
        guard !connection.dropped else { return }
        var headers = HPACKHeaders()
        headers.reserveCapacity(3)
        headers.add(name: ":status", value: Self.statusText(response.status))
        // Unique per response: indexing it would only churn both ends' HPACK tables.
        headers.add(name: "apns-id", value: response.apnsID, indexing: .nonIndexable)
        if let reason = response.reason {
            headers.add(name: "content-type", value: "application/json")
            context.write(wrapOutboundOut(.headers(.init(headers: headers))), promise: nil)
            var json = #"{"reason":"\#(reason)""#
            if let timestamp = response.timestampMilliseconds { json += #","timestamp":\#(timestamp)"# }
            json += "}"
            let buffer = context.channel.allocator.buffer(string: json)
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        } else {
            context.write(wrapOutboundOut(.headers(.init(headers: headers, endStream: true))), promise: nil)
        }
        connection.responseWritten(response, streamID: streamID)
    }

    private static func statusText(_ status: Int) -> String {
        switch status {
        case 200: "200"
        case 400: "400"
        case 403: "403"
        case 410: "410"
        default: String(status)
        }
    }
}
