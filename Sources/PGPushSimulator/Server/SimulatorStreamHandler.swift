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
        if let malformation = response.malformation {
            writeMalformed(malformation, response, context: context)
            connection.responseWritten(response, streamID: streamID)
            return
        }
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

    private func writeMalformed(_ malformation: MalformedAnswer, _ response: SimulatorResponse, context: ChannelHandlerContext) {
        let variant = Int(response.malformationSeed % 5)
        func headers(_ status: String, _ extra: [(String, String)] = []) -> HPACKHeaders {
            var headers = HPACKHeaders([(":status", status), ("apns-id", response.apnsID)])
            for (name, value) in extra { headers.add(name: name, value: value, indexing: .neverIndexed) }
            return headers
        }
        func data(_ text: String, endStream: Bool) {
            let buffer = context.channel.allocator.buffer(string: text)
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: endStream))), promise: nil)
        }
        switch malformation {
        case .unknownStatus:
            let status = ["299", "418", "451", "520", "999"][variant]
            context.write(wrapOutboundOut(.headers(.init(headers: headers(status, [("content-type", "application/json")])))), promise: nil)
            data(#"{"reason":"Teapot"}"#, endStream: true)
        case .badReasonBody:
            let body = ["{not json", #"{"reason":42}"#, "", #"{"reason":"\#(String(repeating: "x", count: 65_536))"}"#, "[1,2"][variant]
            context.write(wrapOutboundOut(.headers(.init(headers: headers("400", [("content-type", "application/json")])))), promise: nil)
            data(body, endStream: true)
        case .hugeHeader:
            context.write(wrapOutboundOut(.headers(.init(
                headers: headers("200", [("x-padding", String(repeating: "p", count: 20_000))]), endStream: true))), promise: nil)
        case .trailers:
            context.write(wrapOutboundOut(.headers(.init(headers: headers("400", [("content-type", "application/json")])))), promise: nil)
            data(#"{"reason":"BadDeviceToken"}"#, endStream: false)
            context.write(wrapOutboundOut(.headers(.init(headers: HPACKHeaders([("x-trailer", "1")]), endStream: true))), promise: nil)
        case .dataAfterEndStream:
            context.write(wrapOutboundOut(.headers(.init(headers: headers("200"), endStream: true))), promise: nil)
            context.flush()
            // Below the HTTP/2 handler, which would refuse a frame on a closed stream: raw bytes of a DATA frame.
            guard let parent = context.channel.parent,
                  let below = try? parent.pipeline.syncOperations.context(handlerType: NIOHTTP2Handler.self)
            else { return }
            var frame = context.channel.allocator.buffer(capacity: 16)
            let payload: [UInt8] = Array("late".utf8)
            frame.writeBytes([UInt8(0), UInt8(0), UInt8(payload.count)])  // 24-bit length
            frame.writeInteger(UInt8(0x0))  // type DATA
            frame.writeInteger(UInt8(0x1))  // flags END_STREAM
            frame.writeInteger(UInt32(streamID) & 0x7FFF_FFFF)
            frame.writeBytes(payload)
            below.write(NIOAny(frame), promise: nil)
            below.flush()
        }
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
