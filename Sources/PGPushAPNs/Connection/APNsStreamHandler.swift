import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import PGPushCore

/// How one stream ended, before the connection interprets what a missing response means.
enum APNsStreamResult: Sendable {
    case response(APNsResponse)
    /// The stream closed without a complete response.
    /// - streamID: `nil` if the request never reached the wire.
    /// - resetCode: the RST_STREAM error code (GOAWAY-dropped streams report REFUSED_STREAM).
    /// - sawHeadersWithoutStatus: response headers came but had no `:status`.
    case closed(streamID: Int?, resetCode: UInt32?, sawHeadersWithoutStatus: Bool)
    /// The request deadline passed; the stream was reset.
    case timedOut
}

/// The child-channel handler of one request stream: writes HEADERS and DATA in one flush, collects the
/// response, and reports exactly once through `onComplete` (on the event loop).
final class APNsStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private var requestHeaders: HPACKHeaders?
    private let requestBody: [UInt8]
    private let timeout: TimeAmount
    private let maximumBodyBytes: Int
    private var onComplete: ((APNsStreamResult) -> Void)?

    private var status: Int?
    private var responseAPNsID: UUID?
    private var sawHeadersWithoutStatus = false
    private var responseBody: [UInt8] = []
    private var resetCode: UInt32?
    private var streamID: Int?
    private let deadlines: APNsStreamDeadlines
    private var context: ChannelHandlerContext?
    /// When the request times out; read by the connection's deadline sweep.
    private(set) var deadline = NIODeadline.distantFuture
    /// This stream's place in the connection's deadline list while it is tracked.
    var deadlineSlot: Int?

    init(
        headers: HPACKHeaders,
        body: [UInt8],
        timeout: TimeAmount,
        maximumBodyBytes: Int,
        deadlines: APNsStreamDeadlines,
        onComplete: @escaping (APNsStreamResult) -> Void
    ) {
        self.deadlines = deadlines
        self.requestHeaders = headers
        self.requestBody = body
        self.timeout = timeout
        self.maximumBodyBytes = maximumBodyBytes
        self.onComplete = onComplete
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { sendRequest(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendRequest(context: context)
        context.fireChannelActive()
    }

    private func sendRequest(context: ChannelHandlerContext) {
        guard let headers = requestHeaders else { return }
        requestHeaders = nil
        var buffer = context.channel.allocator.buffer(capacity: requestBody.count)
        buffer.writeBytes(requestBody)
        context.write(wrapOutboundOut(.headers(.init(headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        // Within a batch the connection's flush batcher turns this into one flush for the whole batch.
        context.flush()
        streamID = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)).map { Int($0) }
        self.context = context
        deadline = .now() + timeout
        deadlines.track(self)
    }

    /// Called by the connection's deadline sweep.
    func deadlinePassed() {
        guard let context else { return }
        finish(.timedOut)
        // Closing an open stream channel sends RST_STREAM(CANCEL), which frees the server's stream slot.
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let frame):
            // Trailers (a second HEADERS) never carry :status; only the first block sets it.
            if status == nil {
                if let statusText = frame.headers.first(name: ":status"), let parsed = Int(statusText) {
                    status = parsed
                    responseAPNsID = frame.headers.first(name: "apns-id").flatMap { UUID(apnsIDString: $0) }
                } else {
                    sawHeadersWithoutStatus = true
                }
            }
            if frame.endStream { finishWithResponse() }
        case .data(let frame):
            if case .byteBuffer(let buffer) = frame.data {
                let room = maximumBodyBytes - responseBody.count
                if room > 0 { responseBody.append(contentsOf: buffer.readableBytesView.prefix(room)) }
            }
            if frame.endStream { finishWithResponse() }
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let closed = error as? NIOHTTP2Errors.StreamClosed {
            resetCode = UInt32(closed.errorCode.networkCode)
            if streamID == nil { streamID = Int(closed.streamID) }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if status != nil, resetCode == nil {
            // END_STREAM may be implied by a clean close after the final frame.
            finishWithResponse()
        } else {
            finish(.closed(streamID: streamID, resetCode: resetCode, sawHeadersWithoutStatus: sawHeadersWithoutStatus))
        }
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        finish(.closed(streamID: streamID, resetCode: resetCode, sawHeadersWithoutStatus: sawHeadersWithoutStatus))
    }

    /// The stream channel could not be created; nothing reached the wire unless a stream id was assigned.
    func failBeforeStart() {
        finish(.closed(streamID: streamID, resetCode: resetCode, sawHeadersWithoutStatus: false))
    }

    private func finishWithResponse() {
        guard let status else {
            finish(.closed(streamID: streamID, resetCode: resetCode, sawHeadersWithoutStatus: true))
            return
        }
        let body = status == 200 ? APNsResponseBody() : APNsResponseBody.parse(responseBody)
        finish(.response(APNsResponse(
            status: status,
            reason: body.reason,
            timestampMilliseconds: body.timestampMilliseconds,
            apnsID: responseAPNsID
        )))
    }

    private func finish(_ result: APNsStreamResult) {
        guard let onComplete else { return }
        self.onComplete = nil
        deadlines.untrack(self)
        onComplete(result)
    }
}
