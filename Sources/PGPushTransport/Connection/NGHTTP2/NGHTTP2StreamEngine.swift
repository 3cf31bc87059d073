import CNGHTTP2
import NIOCore
import NIOHPACK
import PGPushCore

/// The connection's one handler after NIO SSL when the engine is ``HTTP2Engine/nghttp2``: it owns an
/// `nghttp2_session`. Decrypted bytes go in through `mem_recv`; the frames the session has ready go out
/// through `mem_send`, gathered into one buffer per flush; requests go in through `submit_request`; the
/// session's callbacks match answers to requests. Results reach the pool as the NIO engine's do, deferred
/// through ``HTTP2DeferredResults``, so the pool and its state machines cannot tell the engines apart.
///
/// libnghttp2 answers PING and SETTINGS, returns flow-control credit, holds DATA back for the send window
/// and closes the streams a GOAWAY dropped (as REFUSED_STREAM). A close asked of the channel sends our own
/// GOAWAY first, as the NIO engine does. Only the connection's event loop touches it.
///
/// The session's callbacks report events to the pool, which may answer at once on the same stack (a PING, a
/// close). libnghttp2 must not be re-entered from its callbacks, so while it runs, output and a requested
/// close wait until `mem_recv` returns.
final class NGHTTP2StreamEngine: ChannelDuplexHandler, HTTP2StreamEngine {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    struct OpenStream {
        var onResult: @Sendable (HTTP2StreamResult) -> Void
        var deadline: NIODeadline
        var maximumBodyBytes: Int
        var keepsBody: Bool
        /// The request's body, until the data provider has handed all of it to the session.
        var requestBody: [UInt8]
        var requestBodySent = 0
        var status: Int?
        /// The response's first header block; the provider's rules read it once the answer is complete.
        var headers = HPACKHeaders()
        var firstBlockComplete = false
        var sawHeadersWithoutStatus = false
        var body: [UInt8] = []
    }

    private let onEvent: @Sendable (HTTP2ConnectionEvent) -> Void
    let rules: any HTTP2ProviderRules
    private let results: HTTP2DeferredResults
    private var session: NGHTTP2Session!
    private var context: ChannelHandlerContext?
    private var streams: [Int32: OpenStream] = [:]
    private var headerPairs = NGHTTP2HeaderPairs()
    /// The response fields the rules read (``HTTP2ProviderRules/responseHeaderNames``), with their bytes.
    private let keptResponseHeaderNames: [(name: String, bytes: [UInt8])]
    private var acceptsStreams = true
    private var started = false
    private var inactive = false
    private var readSinceFlush = false
    private var goAwayReceived = false
    /// The session is running (`mem_recv`, `mem_send`): its callbacks may be on the stack.
    private var inSession = false
    /// A close asked for while the session was running, with its promise: it goes out once `mem_recv` returns.
    private var deferredClose: EventLoopPromise<Void>??
    /// The channel's close has begun (ours, after a failure, or after the session ended).
    private var closeStarted = false
    private var firstError: String?
    private var tlsRefusal: TLSRefusal?

    init(
        rules: any HTTP2ProviderRules, results: HTTP2DeferredResults,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) throws {
        self.rules = rules
        keptResponseHeaderNames = rules.responseHeaderNames.map { ($0, Array($0.lowercased().utf8)) }
        self.results = results
        self.onEvent = onEvent
        streams.reserveCapacity(1024)
        // Unretained: the pipeline and the connection keep the engine alive for as long as the session.
        session = try NGHTTP2Session(userData: Unmanaged.passUnretained(self).toOpaque())
    }

    // MARK: - Channel

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // Behind a proxy's tunnel the channel is already active when the handler is added.
        if context.channel.isActive { start(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    /// The preface and SETTINGS; NIO SSL holds them until its handshake is done.
    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        do {
            try session.submitSettings([
                (NGHTTP2_SETTINGS_ENABLE_PUSH, 0),
                (NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 0),
                (NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16_384),
            ])
        } catch {
            fail(error, context: context)
            return
        }
        flushOutput(context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !inactive else { return }
        inSession = true
        let failure: (any Error)?
        do {
            try session.receive(unwrapInboundIn(data))
            failure = nil
        } catch {
            failure = error
        }
        inSession = false
        readSinceFlush = true
        if let failure { fail(failure, context: context) }
        if let promise = deferredClose {
            deferredClose = nil
            flushOutput(context: context)
            context.close(mode: .all, promise: promise)
        }
    }

    /// Whatever the reads asked for (SETTINGS and PING ACKs, WINDOW_UPDATEs) goes out in one write.
    func channelReadComplete(context: ChannelHandlerContext) {
        if readSinceFlush, !inactive {
            readSinceFlush = false
            flushOutput(context: context)
        }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        inactive = true
        acceptsStreams = false
        let open = streams
        streams.removeAll()
        // The session is not fed again, so it reports none of these itself.
        for (streamID, stream) in open {
            report(endWithoutResponse(stream, streamID: streamID, resetCode: nil), to: stream.onResult)
        }
        onEvent(.closed(error: firstError, tlsRefusal: tlsRefusal))
        context.fireChannelInactive()
    }

    private func fail(_ error: any Error, context: ChannelHandlerContext) {
        if firstError == nil { firstError = String(describing: error) }
        if tlsRefusal == nil { tlsRefusal = TLSRefusal(error) }
        acceptsStreams = false
        closeStarted = true
        context.close(promise: nil)
    }

    /// A close asked of the channel (the pool retiring the connection, a shutdown): our GOAWAY goes out first,
    /// so the server knows no new stream will come, then the close. Streams still open end at the close.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard mode == .all, started, !inactive, !closeStarted else {
            context.close(mode: mode, promise: promise)
            return
        }
        closeStarted = true
        acceptsStreams = false
        session.terminate()
        if inSession {
            deferredClose = .some(promise)
            return
        }
        flushOutput(context: context)
        context.close(mode: mode, promise: promise)
    }

    /// Writes what the session has ready, as one buffer, and closes the channel once the session is over.
    /// While the session runs, it only notes that output waits: the read's end flushes it.
    private func flushOutput(context: ChannelHandlerContext) {
        guard !inSession else {
            readSinceFlush = true
            return
        }
        var output: ByteBuffer?
        inSession = true
        let failure: (any Error)?
        do {
            try session.send(into: &output, allocator: context.channel.allocator)
            failure = nil
        } catch {
            failure = error
        }
        inSession = false
        if let output { context.writeAndFlush(wrapOutboundOut(output), promise: nil) }
        if let failure {
            fail(failure, context: context)
            return
        }
        if !session.isAlive, !inactive, !closeStarted {
            // After the server's GOAWAY this is the drained connection's end; otherwise nghttp2 found a protocol
            // error and has sent its own GOAWAY.
            acceptsStreams = false
            closeStarted = true
            if firstError == nil {
                firstError = goAwayReceived ? "closed after the server's GOAWAY, no stream left" : "nghttp2 ended the HTTP/2 session (protocol error)"
            }
            context.close(promise: nil)
        }
    }

    // MARK: - Requests

    func open(_ batch: [HTTP2PendingStream]) {
        guard let context, context.channel.isActive, acceptsStreams else {
            for pending in batch { reportNotSent(pending) }
            return
        }
        let now = NIODeadline.now()
        var idsUsedUp = false
        for pending in batch {
            let streamID = headerPairs.withPairs(of: pending.headers) { pairs, count in
                session.submitRequest(pairs, count: count, hasBody: !pending.body.isEmpty)
            }
            guard streamID > 0 else {
                // Stream ids used up (after about a billion requests): the pool replaces the connection.
                if streamID == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue { idsUsedUp = true }
                reportNotSent(pending)
                continue
            }
            streams[streamID] = OpenStream(
                onResult: pending.onResult, deadline: now + pending.timeout, maximumBodyBytes: pending.maximumBodyBytes,
                keepsBody: pending.keepsBody, requestBody: pending.body)
        }
        flushOutput(context: context)
        if idsUsedUp, acceptsStreams {
            acceptsStreams = false
            context.close(mode: .all, promise: nil)
        }
    }

    func sweepDeadlines(now: NIODeadline) {
        guard let context, !streams.isEmpty else { return }
        let expired = streams.compactMap { $0.value.deadline <= now ? $0.key : nil }
        guard !expired.isEmpty else { return }
        for streamID in expired {
            guard let stream = streams.removeValue(forKey: streamID) else { continue }
            report(.timedOut, to: stream.onResult)
            // Frees the server's slot; the session's close callback then finds no stream and says nothing.
            session.resetStream(streamID, errorCode: NGHTTP2_CANCEL)
        }
        flushOutput(context: context)
    }

    func sendPing(_ payload: UInt64) {
        guard let context, !inactive else { return }
        session.ping(payload)
        flushOutput(context: context)
    }

    private func reportNotSent(_ pending: HTTP2PendingStream) {
        report(.closed(streamID: nil, resetCode: nil, sawHeadersWithoutStatus: false), to: pending.onResult)
    }

    private func report(_ result: HTTP2StreamResult, to onResult: @escaping @Sendable (HTTP2StreamResult) -> Void) {
        results.deliver(result, to: onResult)
    }

    // MARK: - Session callbacks

    func readBody(streamID: Int32, into buffer: UnsafeMutableBufferPointer<UInt8>, flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard let index = streams.index(forKey: streamID) else {
            return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
        }
        let sent = streams.values[index].requestBodySent
        let count = streams.values[index].requestBody.withUnsafeBufferPointer { body in
            let count = min(body.count - sent, buffer.count)
            if count > 0 { buffer.baseAddress!.update(from: body.baseAddress! + sent, count: count) }
            return count
        }
        streams.values[index].requestBodySent += count
        if streams.values[index].requestBodySent == streams.values[index].requestBody.count {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            streams.values[index].requestBody = []
        }
        return count
    }

    func headerReceived(streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        guard let index = streams.index(forKey: streamID), !streams.values[index].firstBlockComplete else { return }
        // Trailers never carry :status; only the first block with one sets it, as with the NIO engine.
        if streams.values[index].status == nil, name.elementsEqual(":status".utf8) {
            streams.values[index].status = Self.decimal(value)
            return
        }
        // Only the fields the provider's rules read become strings. HTTP/2 names are lowercase, but with HTTP
        // messaging checks off nghttp2 hands over any bytes: a name is matched in any case, and kept lowercase.
        guard let kept = keptResponseHeaderNames.first(where: { Self.equalIgnoringASCIICase(name, $0.bytes) }) else { return }
        streams.values[index].headers.add(name: kept.name, value: String(decoding: value, as: UTF8.self))
    }

    /// A status code's digits, or nil for anything else.
    private static func decimal(_ digits: UnsafeBufferPointer<UInt8>) -> Int? {
        guard !digits.isEmpty, digits.count <= 9 else { return nil }
        var number = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            number = number * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return number
    }

    private static func equalIgnoringASCIICase(_ bytes: UnsafeBufferPointer<UInt8>, _ lowercase: [UInt8]) -> Bool {
        guard bytes.count == lowercase.count else { return false }
        for (byte, expected) in zip(bytes, lowercase) where byte != expected {
            guard byte >= UInt8(ascii: "A"), byte <= UInt8(ascii: "Z"), byte + 32 == expected else { return false }
        }
        return true
    }

    func dataReceived(streamID: Int32, bytes: UnsafeBufferPointer<UInt8>) {
        guard let index = streams.index(forKey: streamID) else { return }
        let room = streams.values[index].maximumBodyBytes - streams.values[index].body.count
        if room > 0 { streams.values[index].body.append(contentsOf: bytes.prefix(room)) }
    }

    func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let header = frame.pointee.hd
        switch UInt32(header.type) {
        case NGHTTP2_HEADERS.rawValue:
            guard let index = streams.index(forKey: header.stream_id) else { return }
            if !streams.values[index].firstBlockComplete {
                if streams.values[index].status == nil {
                    streams.values[index].sawHeadersWithoutStatus = true
                    streams.values[index].headers = HPACKHeaders()
                } else {
                    streams.values[index].firstBlockComplete = true
                }
            }
            // The answer is complete at the server's END_STREAM, as with the NIO engine, even while our own side
            // of the stream is still open (a body not yet sent in full); nghttp2's close then finds no stream.
            if header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0 { finishWithResponse(header.stream_id) }
        case NGHTTP2_DATA.rawValue:
            if header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0 { finishWithResponse(header.stream_id) }
        case NGHTTP2_RST_STREAM.rawValue:
            // Reported here, with its code, before nghttp2 closes the stream.
            closeStream(header.stream_id, resetCode: frame.pointee.rst_stream.error_code)
        case NGHTTP2_SETTINGS.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0:
            let settings = frame.pointee.settings
            var limit: Int?
            for entry in UnsafeBufferPointer(start: settings.iv, count: settings.niv)
            where entry.settings_id == Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue) {
                limit = Int(entry.value)
            }
            onEvent(.settings(maxConcurrentStreams: limit))
        case NGHTTP2_GOAWAY.rawValue:
            acceptsStreams = false
            goAwayReceived = true
            let goAway = frame.pointee.goaway
            let debug = goAway.opaque_data.map { String(decoding: UnsafeBufferPointer(start: $0, count: goAway.opaque_data_len), as: UTF8.self) }
            onEvent(.goAway(lastStreamID: Int(goAway.last_stream_id), errorCode: goAway.error_code, debugData: debug))
        case NGHTTP2_PING.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0:
            var payload: UInt64 = 0
            withUnsafeMutableBytes(of: &payload) { target in
                withUnsafeBytes(of: frame.pointee.ping.opaque_data) { target.copyMemory(from: $0) }
            }
            onEvent(.pingAck(UInt64(bigEndian: payload)))
        default:
            break
        }
    }

    /// The session could not send a request's HEADERS (a GOAWAY came first, or the session is ending): nothing
    /// reached the wire, and as the stream was never opened, nghttp2 reports no close for it.
    func requestNotSent(streamID: Int32) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        report(.closed(streamID: nil, resetCode: nil, sawHeadersWithoutStatus: false), to: stream.onResult)
    }

    /// A stream the frames above did not finish: dropped by a GOAWAY (REFUSED_STREAM), or reset by nghttp2
    /// itself after a stream error.
    func streamClosed(streamID: Int32, errorCode: UInt32) {
        closeStream(streamID, resetCode: errorCode == NGHTTP2_NO_ERROR.rawValue ? nil : errorCode)
    }

    private func finishWithResponse(_ streamID: Int32) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        report(response(of: stream, streamID: streamID), to: stream.onResult)
    }

    private func closeStream(_ streamID: Int32, resetCode: UInt32?) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        report(endWithoutResponse(stream, streamID: streamID, resetCode: resetCode), to: stream.onResult)
    }

    // MARK: - Results

    /// A stream that ended without a clean close: a response if its status arrived and nothing reset it.
    private func endWithoutResponse(_ stream: OpenStream, streamID: Int32, resetCode: UInt32?) -> HTTP2StreamResult {
        if stream.status != nil, resetCode == nil { return response(of: stream, streamID: streamID) }
        return .closed(streamID: Int(streamID), resetCode: resetCode, sawHeadersWithoutStatus: stream.sawHeadersWithoutStatus)
    }

    private func response(of stream: OpenStream, streamID: Int32) -> HTTP2StreamResult {
        guard let status = stream.status else {
            return .closed(streamID: Int(streamID), resetCode: nil, sawHeadersWithoutStatus: true)
        }
        return .response(rules.response(status: status, headers: stream.headers, body: stream.body, keepsBody: stream.keepsBody))
    }
}
