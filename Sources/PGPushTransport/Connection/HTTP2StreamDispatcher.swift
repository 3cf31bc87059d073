import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import PGPushCore

/// One request waiting to be written on a connection.
struct HTTP2PendingStream {
    var headers: HTTP2HeaderBlock
    var body: [UInt8]
    var timeout: TimeAmount
    var maximumBodyBytes: Int
    /// Keep the response body's bytes in the response (error objects that say more than a reason, OAuth
    /// answers) instead of only what the provider's rules read from it.
    var keepsBody: Bool
    var onResult: @Sendable (HTTP2StreamResult) -> Void
}

/// The connection's handler after NIO's HTTP/2 handler. It writes each request as HEADERS and DATA frames on
/// a new stream id, matches response frames to their requests, times requests out, returns the connection's
/// flow-control credit, and reports connection-level frames (SETTINGS, GOAWAY, PING ACK) and the close.
///
/// Streams are frames here, not child channels: a child channel per request (its own pipeline, promise,
/// activation and teardown) cost more than the request itself at tens of thousands of requests per second.
/// Only the connection's event loop touches it. A close asked of the channel sends our own GOAWAY first.
///
/// A stream is opened only when the connection's send window has room for its whole body. NIO would accept
/// it anyway and hold the DATA frame back, but it releases held frames in hash order, not stream order, so
/// the server answers out of order, and NIO's stream maps remove an out-of-order stream in linear time:
/// with a thousand streams in flight that cost more than the request itself.
final class HTTP2StreamDispatcher: ChannelDuplexHandler, HTTP2StreamEngine {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    struct OpenStream {
        var onResult: @Sendable (HTTP2StreamResult) -> Void
        var deadline: NIODeadline
        var maximumBodyBytes: Int
        var keepsBody: Bool
        var status: Int?
        /// The response's first header block; the provider's rules read it once the answer is complete.
        var headers = HPACKHeaders()
        /// DATA bytes of this stream not yet handed back as stream-level WINDOW_UPDATE credit.
        var unreturnedStreamCredit = 0
        var sawHeadersWithoutStatus = false
        var body: [UInt8] = []
    }

    /// Client streams are odd and increase; the last usable id is 2^31 − 1.
    private static let lastStreamID = Int(Int32.max)
    /// Flow-control credit is returned in batches of this many bytes (half the initial 65,535 window).
    private static let windowUpdateThreshold = 32_768
    /// Every HTTP/2 connection's send window starts here; only WINDOW_UPDATE frames on stream 0 change it.
    static let initialConnectionWindow = 65_535

    private let onEvent: @Sendable (HTTP2ConnectionEvent) -> Void
    /// How the provider's answers read: consulted once per answer, when its stream ends.
    let rules: any HTTP2ProviderRules
    private let results: HTTP2DeferredResults
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: OpenStream] = [:]
    private var nextStreamID = 1
    private var acceptsStreams = true
    private var unreturnedCredit = 0
    /// What the server still lets us send, in DATA bytes, on the connection as a whole.
    private var sendWindow = HTTP2StreamDispatcher.initialConnectionWindow
    /// Requests waiting for send window, oldest first, with their deadlines.
    private var waitingForWindow = CircularBuffer<(pending: HTTP2PendingStream, deadline: NIODeadline)>()
    private var firstError: String?
    private var tlsRefusal: TLSRefusal?
    private var closedReported = false
    private var goAwaySent = false

    init(
        rules: any HTTP2ProviderRules, results: HTTP2DeferredResults,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        self.rules = rules
        self.results = results
        self.onEvent = onEvent
        streams.reserveCapacity(1024)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    // MARK: - Requests

    /// Writes every request of `batch` on its own stream, in order, as far as the send window allows, then
    /// flushes once. The rest waits for the server's WINDOW_UPDATE.
    func open(_ batch: [HTTP2PendingStream]) {
        guard let context, context.channel.isActive, acceptsStreams else {
            for pending in batch { reportNotSent(pending) }
            return
        }
        let now = NIODeadline.now()
        for pending in batch {
            if waitingForWindow.isEmpty, pending.body.count <= sendWindow {
                write(pending, deadline: now + pending.timeout, context: context)
            } else {
                waitingForWindow.append((pending, now + pending.timeout))
            }
        }
        context.flush()
        closeIfStreamIDsAreUsedUp(context: context)
    }

    private func write(_ pending: HTTP2PendingStream, deadline: NIODeadline, context: ChannelHandlerContext) {
        guard nextStreamID <= Self.lastStreamID else {
            reportNotSent(pending)
            return
        }
        let streamID = HTTP2StreamID(nextStreamID)
        nextStreamID += 2
        sendWindow -= pending.body.count
        streams[streamID] = OpenStream(
            onResult: pending.onResult, deadline: deadline, maximumBodyBytes: pending.maximumBodyBytes, keepsBody: pending.keepsBody)
        guard !pending.body.isEmpty else {
            // A GET or DELETE (the broadcast channel API): END_STREAM on the HEADERS, no DATA frame at all.
            let headers = HTTP2Frame.FramePayload.Headers(headers: pending.headers.hpackHeaders, endStream: true)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(headers))), promise: nil)
            return
        }
        var buffer = context.channel.allocator.buffer(capacity: pending.body.count)
        buffer.writeBytes(pending.body)
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: pending.headers.hpackHeaders)))), promise: nil)
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true)))),
            promise: nil
        )
    }

    /// Opens the waiting requests the send window now has room for.
    private func openWaitingStreams(context: ChannelHandlerContext) {
        guard !waitingForWindow.isEmpty else { return }
        var wrote = false
        while let first = waitingForWindow.first, first.pending.body.count <= sendWindow, acceptsStreams {
            waitingForWindow.removeFirst()
            write(first.pending, deadline: first.deadline, context: context)
            wrote = true
        }
        if wrote {
            context.flush()
            closeIfStreamIDsAreUsedUp(context: context)
        }
    }

    private func closeIfStreamIDsAreUsedUp(context: ChannelHandlerContext) {
        if nextStreamID > Self.lastStreamID, acceptsStreams {
            // Stream ids are used up (after about a billion requests): let the pool replace the connection.
            acceptsStreams = false
            failWaitingStreams()
            context.close(mode: .all, promise: nil)
        }
    }

    /// Nothing of these reached the wire: the pool reports them as "not processed" and they are re-sent.
    private func failWaitingStreams() {
        while let waiting = waitingForWindow.popFirst() { reportNotSent(waiting.pending) }
    }

    private func reportNotSent(_ pending: HTTP2PendingStream) {
        report(.closed(streamID: nil, resetCode: nil, sawHeadersWithoutStatus: false), to: pending.onResult)
    }

    /// Times out every stream whose deadline has passed and resets it, which frees the server's slot.
    func sweepDeadlines(now: NIODeadline) {
        // Every request on a connection has the same timeout, so the waiting queue is in deadline order.
        while let first = waitingForWindow.first, first.deadline <= now {
            waitingForWindow.removeFirst()
            report(.timedOut, to: first.pending.onResult)
        }
        guard let context, !streams.isEmpty else { return }
        let expired = streams.compactMap { $0.value.deadline <= now ? $0.key : nil }
        guard !expired.isEmpty else { return }
        for streamID in expired {
            guard let stream = streams.removeValue(forKey: streamID) else { continue }
            report(.timedOut, to: stream.onResult)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
        }
        context.flush()
    }

    func sendPing(_ payload: UInt64) {
        context?.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: payload), ack: false))),
            promise: nil
        )
    }

    /// How often a connection sweeps for a given request timeout: a tenth of it, between 10 ms and 1 s.
    /// One sweep instead of a timer per stream: with a thousand streams in flight, per-stream timers cost a
    /// heap insertion and a linear-time cancel each. A deadline fires at most one interval late.
    static func sweepInterval(forTimeout timeout: TimeAmount) -> TimeAmount {
        let tenth = timeout.nanoseconds / 10
        return .nanoseconds(min(max(tenth, 10_000_000), 1_000_000_000))
    }

    // MARK: - Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if frame.streamID == .rootStream {
            readConnectionFrame(frame.payload)
            return
        }
        switch frame.payload {
        case .headers(let headers):
            // One hash lookup per frame; the entry is then updated in place.
            guard let index = streams.index(forKey: frame.streamID) else { return }
            // Trailers (a second HEADERS) never carry :status; only the first block sets it.
            if streams.values[index].status == nil {
                Self.readResponseHeaders(headers.headers, into: &streams.values[index])
            }
            if headers.endStream { finishWithResponse(frame.streamID) }
        case .data(let data):
            if let index = streams.index(forKey: frame.streamID) {
                if case .byteBuffer(let buffer) = data.data {
                    let room = streams.values[index].maximumBodyBytes - streams.values[index].body.count
                    if room > 0 { streams.values[index].body.append(contentsOf: buffer.readableBytesView.prefix(room)) }
                }
                if data.endStream {
                    finishWithResponse(frame.streamID)
                } else {
                    returnStreamCredit(frame.streamID, index: index, bytes: data.data.readableBytes + (data.paddingBytes ?? 0))
                }
            }
            // Last: writing the WINDOW_UPDATE lets NIO flush buffered frames, which can close streams re-entrantly.
            returnCredit(data.data.readableBytes + (data.paddingBytes ?? 0))
        case .rstStream(let code):
            closeStream(frame.streamID, resetCode: UInt32(code.networkCode))
        default:
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Covers the closes no frame announces, such as the streams a GOAWAY dropped. A clean close (no reason)
        // always follows an END_STREAM frame, which already finished the stream; it can be reported before
        // that frame reaches this handler when one of our own writes closes the stream, so it is not used.
        if let closed = event as? StreamClosedEvent, let reason = closed.reason {
            closeStream(closed.streamID, resetCode: UInt32(reason.networkCode))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream-level error is followed by that stream's close; anything else ends the connection.
        if error is NIOHTTP2Errors.StreamError || error is NIOHTTP2Errors.StreamClosed { return }
        if firstError == nil { firstError = String(describing: error) }
        if tlsRefusal == nil { tlsRefusal = TLSRefusal(error) }
        context.close(promise: nil)
    }

    /// A close asked of the channel (the pool retiring the connection, a shutdown): a GOAWAY (NO_ERROR, last
    /// stream 0: the server opens no streams) tells the server no new stream will come, then the close. Streams
    /// still open end at the close.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode == .all, !goAwaySent, context.channel.isActive {
            goAwaySent = true
            acceptsStreams = false
            failWaitingStreams()
            context.writeAndFlush(
                wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: .rootStream, errorCode: .noError, opaqueData: nil))),
                promise: nil
            )
        }
        context.close(mode: mode, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        acceptsStreams = false
        failWaitingStreams()
        let open = streams
        streams.removeAll()
        for (streamID, stream) in open {
            report(endWithoutResponse(stream, streamID: streamID, resetCode: nil), to: stream.onResult)
        }
        if !closedReported {
            closedReported = true
            onEvent(.closed(error: firstError, tlsRefusal: tlsRefusal))
        }
        context.fireChannelInactive()
    }

    // MARK: - Helpers

    private func readConnectionFrame(_ payload: HTTP2Frame.FramePayload) {
        switch payload {
        case .settings(.settings(let settings)):
            let limit = settings.last { $0.parameter == .maxConcurrentStreams }.map { Int($0.value) }
            onEvent(.settings(maxConcurrentStreams: limit))
        case .windowUpdate(let increment):
            sendWindow += increment
            if let context { openWaitingStreams(context: context) }
        case .goAway(let lastStreamID, let errorCode, let opaqueData):
            acceptsStreams = false
            failWaitingStreams()
            let debug = opaqueData.map { String(buffer: $0) }
            onEvent(.goAway(lastStreamID: Int(lastStreamID), errorCode: UInt32(errorCode.networkCode), debugData: debug))
        case .ping(let data, ack: true):
            onEvent(.pingAck(data.integer))
        default:
            break
        }
    }

    private func finishWithResponse(_ streamID: HTTP2StreamID) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        report(response(of: stream, streamID: streamID), to: stream.onResult)
    }

    private func closeStream(_ streamID: HTTP2StreamID, resetCode: UInt32?) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        report(endWithoutResponse(stream, streamID: streamID, resetCode: resetCode), to: stream.onResult)
    }

    /// Returns stream-level flow-control credit for a response body that spans several DATA frames. Push
    /// answers come in one frame and never get here; a long answer (the list of a bundle's broadcast channels,
    /// up to 10,000 ids) would otherwise stall once it filled the stream's initial 65,535-byte window. Bytes
    /// beyond the body limit are credited too, so an oversized answer ends (truncated) instead of timing out.
    private func returnStreamCredit(_ streamID: HTTP2StreamID, index: Dictionary<HTTP2StreamID, OpenStream>.Index, bytes: Int) {
        streams.values[index].unreturnedStreamCredit += bytes
        let increment = streams.values[index].unreturnedStreamCredit
        guard increment >= Self.windowUpdateThreshold, let context else { return }
        streams.values[index].unreturnedStreamCredit = 0
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .windowUpdate(windowSizeIncrement: increment))),
            promise: nil
        )
    }

    /// Returns connection-level flow-control credit for DATA received. Stream windows are handled by
    /// ``returnStreamCredit(_:index:bytes:)``, only for bodies longer than one frame.
    private func returnCredit(_ bytes: Int) {
        unreturnedCredit += bytes
        guard unreturnedCredit >= Self.windowUpdateThreshold, let context else { return }
        let increment = unreturnedCredit
        unreturnedCredit = 0
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))),
            promise: nil
        )
    }

    private func report(_ result: HTTP2StreamResult, to onResult: @escaping @Sendable (HTTP2StreamResult) -> Void) {
        results.deliver(result, to: onResult)
    }
}
