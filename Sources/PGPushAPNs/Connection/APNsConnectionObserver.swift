import NIOCore
import NIOHTTP2

/// Connection-level events that the pool feeds into the connection's state machine.
enum APNsConnectionEvent: Sendable {
    /// A SETTINGS frame; `maxConcurrentStreams` is `nil` when it did not carry that setting.
    case settings(maxConcurrentStreams: Int?)
    case goAway(lastStreamID: Int, errorCode: UInt32, debugData: String?)
    case pingAck(UInt64)
    /// The channel closed; `error` describes why when it failed (TLS handshake, ALPN, reset).
    case closed(error: String?)
}

/// Sits after the HTTP/2 handler and reads the root-stream frames that the inline multiplexer passes down
/// the parent pipeline (SETTINGS, GOAWAY, PING ACK). NIO sends the ACKs itself.
final class APNsConnectionObserver: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame

    private let onEvent: @Sendable (APNsConnectionEvent) -> Void
    private var firstError: String?
    private var closedReported = false

    init(onEvent: @escaping @Sendable (APNsConnectionEvent) -> Void) {
        self.onEvent = onEvent
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            let limit = settings.last { $0.parameter == .maxConcurrentStreams }.map { Int($0.value) }
            onEvent(.settings(maxConcurrentStreams: limit))
        case .goAway(let lastStreamID, let errorCode, let opaqueData):
            let debug = opaqueData.map { String(buffer: $0) }
            onEvent(.goAway(lastStreamID: Int(lastStreamID), errorCode: UInt32(errorCode.networkCode), debugData: debug))
        case .ping(let data, ack: true):
            onEvent(.pingAck(data.integer))
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Stream-level errors belong to their streams; anything else ends the connection.
        if error is NIOHTTP2Errors.StreamClosed || error is NIOHTTP2Errors.StreamError { return }
        recordError(String(describing: error))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !closedReported {
            closedReported = true
            onEvent(.closed(error: firstError))
        }
        context.fireChannelInactive()
    }

    private func recordError(_ text: String) {
        if firstError == nil { firstError = text }
    }
}
