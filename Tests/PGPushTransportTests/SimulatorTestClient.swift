import Crypto
import Foundation
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL
import Synchronization

/// A deliberately raw HTTP/2 client for simulator tests: it writes frames itself, so it can do what a polite
/// client never would (exceed the stream limit, send duplicate headers) and it sees every frame the server sends.
/// It does not depend on PGPushTransport, which is tested against the simulator separately.
final class SimulatorRawClient: Sendable {
    /// What happened to one stream.
    enum Outcome: Sendable, Equatable {
        case response(status: Int, headers: [String: String], body: String)
        case reset(code: UInt32)
        case connectionClosed

        var status: Int? { if case .response(let status, _, _) = self { status } else { nil } }
        var reason: String? {
            guard case .response(_, _, let body) = self, let data = body.data(using: .utf8),
                  let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
            return json["reason"] as? String
        }
        var timestamp: Int64? {
            guard case .response(_, _, let body) = self, let data = body.data(using: .utf8),
                  let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
            return (json["timestamp"] as? NSNumber)?.int64Value
        }
        var apnsID: String? { if case .response(_, let headers, _) = self { headers["apns-id"] } else { nil } }
    }

    struct GoAway: Sendable, Equatable {
        var lastStreamID: UInt32
        var errorCode: UInt32
        var debugData: String
    }

    struct State: Sendable {
        var streams: [UInt32: (headers: [String: String], body: String, done: Outcome?)] = [:]
        var maxConcurrentStreamsSettings: [UInt32] = []
        var goAways: [GoAway] = []
        var closed = false
    }

    /// Shared between the client and its frame reader.
    final class SharedState: Sendable {
        let mutex = Mutex(State())
        func withLock<T>(_ body: (inout State) -> T) -> T { mutex.withLock { body(&$0) } }
    }

    let channel: Channel
    let state: SharedState
    private let writer: Mutex<(nextStreamID: UInt32, encoder: HPACKEncoder)>

    private init(channel: Channel, state: SharedState) {
        self.channel = channel
        self.state = state
        self.writer = Mutex((1, HPACKEncoder(allocator: ByteBufferAllocator())))
    }

    static func connect(
        port: Int, caPath: String, clientCertificate: (certificate: String, key: String)? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> SimulatorRawClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caPath))
        tls.applicationProtocols = ["h2"]
        if let clientCertificate {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(clientCertificate.certificate).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: clientCertificate.key, format: .pem))
        }
        let sslContext = try NIOSSLContext(configuration: tls)
        let reader = RawFrameReader()
        let channel = try await ClientBootstrap(group: group)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: sslContext, serverHostname: "localhost"))
                    try channel.pipeline.syncOperations.addHandler(reader)
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        let client = SimulatorRawClient(channel: channel, state: reader.state)
        reader.client = client
        return client
    }

    /// Writes a request; returns its stream id. `streamID` overrides the next odd id.
    @discardableResult
    func send(method: String = "POST", path: String, headers: [(String, String)], body: String?,
              endStream: Bool = true) throws -> UInt32 {
        var buffer = channel.allocator.buffer(capacity: 512)
        let streamID: UInt32 = try writer.withLock { writer in
            let id = writer.nextStreamID
            writer.nextStreamID += 2
            var block = HPACKHeaders([(":method", method), (":scheme", "https"), (":path", path),
                                      (":authority", "localhost")])
            for (name, value) in headers { block.add(name: name, value: value) }
            var encoded = channel.allocator.buffer(capacity: 256)
            try writer.encoder.encode(headers: block, to: &encoded)
            let endStreamFlag: UInt8 = body == nil && endStream ? 0x1 : 0
            Self.appendFrame(to: &buffer, type: 0x1, flags: 0x4 | endStreamFlag, streamID: id,
                             payload: Array(encoded.readableBytesView))
            if let body {
                Self.appendFrame(to: &buffer, type: 0x0, flags: endStream ? 0x1 : 0, streamID: id, payload: Array(body.utf8))
            }
            return id
        }
        state.withLock { $0.streams[streamID] = ([:], "", nil) }
        channel.writeAndFlush(buffer, promise: nil)
        return streamID
    }

    /// Sends the final DATA frame of a stream opened with `endStream: false`.
    func finish(streamID: UInt32, body: String) {
        var buffer = channel.allocator.buffer(capacity: 64 + body.utf8.count)
        Self.appendFrame(to: &buffer, type: 0x0, flags: 0x1, streamID: streamID, payload: Array(body.utf8))
        channel.writeAndFlush(buffer, promise: nil)
    }

    /// Waits (bounded) until the stream ends, is reset, or the connection closes.
    func outcome(_ streamID: UInt32, timeout: Duration = .seconds(10)) async throws -> Outcome {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let result: Outcome? = state.withLock { state in
                if let done = state.streams[streamID]?.done { return done }
                return state.closed ? .connectionClosed : nil
            }
            if let result { return result }
            try await Task.sleep(for: .milliseconds(2))
        }
        throw TimeoutError()
    }

    /// Sends one request and waits for its outcome.
    func request(method: String = "POST", path: String, headers: [(String, String)], body: String?) async throws -> Outcome {
        let id = try send(method: method, path: path, headers: headers, body: body)
        return try await outcome(id)
    }

    /// Waits (bounded) until `condition` holds for the connection state.
    func wait(timeout: Duration = .seconds(10), until condition: (State) -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if state.withLock({ condition($0) }) { return }
            try await Task.sleep(for: .milliseconds(2))
        }
        throw TimeoutError()
    }

    var snapshot: State { state.withLock { $0 } }

    func close() async {
        try? await channel.close()
    }

    struct TimeoutError: Error {}

    static func appendFrame(to buffer: inout ByteBuffer, type: UInt8, flags: UInt8, streamID: UInt32, payload: [UInt8]) {
        buffer.writeInteger(UInt32(payload.count) << 8 | UInt32(type))
        buffer.writeInteger(flags)
        buffer.writeInteger(streamID & 0x7FFF_FFFF)
        buffer.writeBytes(payload)
    }
}

/// Parses inbound frames into the client's state and answers SETTINGS and PING like any peer must.
private final class RawFrameReader: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let state = SimulatorRawClient.SharedState()
    weak var client: SimulatorRawClient?
    private var pending = ByteBuffer()
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        pending.writeBuffer(&incoming)
        while pending.readableBytes >= 9 {
            let header = pending.getInteger(at: pending.readerIndex, as: UInt32.self)!
            let length = Int(header >> 8)
            guard pending.readableBytes >= 9 + length else { break }
            let type = UInt8(header & 0xFF)
            let flags = pending.getInteger(at: pending.readerIndex + 4, as: UInt8.self)!
            let streamID = pending.getInteger(at: pending.readerIndex + 5, as: UInt32.self)! & 0x7FFF_FFFF
            pending.moveReaderIndex(forwardBy: 9)
            var payload = pending.readSlice(length: length)!
            handle(context: context, type: type, flags: flags, streamID: streamID, payload: &payload)
        }
        pending.discardReadBytes()
    }

    private func handle(context: ChannelHandlerContext, type: UInt8, flags: UInt8, streamID: UInt32,
                        payload: inout ByteBuffer) {
        switch type {
        case 0x0:  // DATA
            let text = payload.readString(length: payload.readableBytes) ?? ""
            let count = text.utf8.count
            state.withLock { state in
                state.streams[streamID]?.body += text
                if flags & 0x1 != 0 { finish(&state, streamID) }
            }
            if count > 0 {  // keep the server's send windows open
                var update = context.channel.allocator.buffer(capacity: 26)
                var increment = context.channel.allocator.buffer(capacity: 4)
                increment.writeInteger(UInt32(count))
                SimulatorRawClient.appendFrame(to: &update, type: 0x8, flags: 0, streamID: 0,
                                               payload: Array(increment.readableBytesView))
                context.writeAndFlush(wrapOutboundOut(update), promise: nil)
            }
        case 0x1:  // HEADERS (the simulator never needs CONTINUATION)
            let headers = (try? decoder.decodeHeaders(from: &payload)) ?? HPACKHeaders()
            state.withLock { state in
                for (name, value, _) in headers { state.streams[streamID, default: ([:], "", nil)].headers[name] = value }
                if flags & 0x1 != 0 { finish(&state, streamID) }
            }
        case 0x3:  // RST_STREAM
            let code = payload.readInteger(as: UInt32.self) ?? 0
            state.withLock { $0.streams[streamID, default: ([:], "", nil)].done = .reset(code: code) }
        case 0x4 where flags & 0x1 == 0:  // SETTINGS
            while payload.readableBytes >= 6 {
                let id = payload.readInteger(as: UInt16.self)!
                let value = payload.readInteger(as: UInt32.self)!
                if id == 0x3 { state.withLock { $0.maxConcurrentStreamsSettings.append(value) } }
            }
            var ack = context.channel.allocator.buffer(capacity: 9)
            SimulatorRawClient.appendFrame(to: &ack, type: 0x4, flags: 0x1, streamID: 0, payload: [])
            context.writeAndFlush(wrapOutboundOut(ack), promise: nil)
        case 0x6 where flags & 0x1 == 0:  // PING
            var pong = context.channel.allocator.buffer(capacity: 17)
            SimulatorRawClient.appendFrame(to: &pong, type: 0x6, flags: 0x1, streamID: 0,
                                           payload: Array(payload.readableBytesView))
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case 0x7:  // GOAWAY
            let last = (payload.readInteger(as: UInt32.self) ?? 0) & 0x7FFF_FFFF
            let code = payload.readInteger(as: UInt32.self) ?? 0
            let debug = payload.readString(length: payload.readableBytes) ?? ""
            state.withLock { $0.goAways.append(.init(lastStreamID: last, errorCode: code, debugData: debug)) }
        default:
            break
        }
    }

    private func finish(_ state: inout SimulatorRawClient.State, _ streamID: UInt32) {
        guard let stream = state.streams[streamID] else { return }
        let status = Int(stream.headers[":status"] ?? "") ?? 0
        state.streams[streamID]?.done = .response(status: status, headers: stream.headers, body: stream.body)
    }

    /// The preface goes out first, before any SETTINGS ACK this reader might write.
    func channelActive(context: ChannelHandlerContext) {
        var preface = context.channel.allocator.buffer(string: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        SimulatorRawClient.appendFrame(to: &preface, type: 0x4, flags: 0, streamID: 0, payload: [])
        context.writeAndFlush(wrapOutboundOut(preface), promise: nil)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.withLock { $0.closed = true }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Mints ES256 provider tokens the way APNs expects them.
struct SimulatorTestSigner: Sendable {
    let teamID: String
    let keyID: String
    let key: P256.Signing.PrivateKey

    init(teamID: String = "TEAM123456", keyID: String = "KEY1234567", key: P256.Signing.PrivateKey = .init()) {
        self.teamID = teamID
        self.keyID = keyID
        self.key = key
    }

    func token(issuedAt: Date = Date(), keyID: String? = nil, teamID: String? = nil) throws -> String {
        let header = #"{"alg":"ES256","kid":"\#(keyID ?? self.keyID)"}"#
        let claims = #"{"iss":"\#(teamID ?? self.teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#
        let input = Self.base64URL(Data(header.utf8)) + "." + Self.base64URL(Data(claims.utf8))
        let signature = try key.signature(for: Data(input.utf8)).rawRepresentation
        return input + "." + Self.base64URL(signature)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}
