import NIOCore
import NIOHTTP2

/// Rewrites SETTINGS_MAX_CONCURRENT_STREAMS in the SETTINGS frames the HTTP/2 handler writes, so the client
/// sees the APNs-like limit of its connection while NIO's own limit stays high.
///
/// NIO treats a peer exceeding the local limit as a connection error (GOAWAY PROTOCOL_ERROR); APNs refuses
/// the extra stream instead. Keeping NIO's limit high lets ``SimulatorStreamHandler`` refuse and count them.
/// Sits between the TLS handler and the HTTP/2 handler, which writes each frame as one buffer (DATA payloads
/// may follow as a separate write), so frame boundaries can be tracked by length.
final class AdvertisedStreamLimitRewriter: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private let connection: SimulatorConnection
    /// Bytes of the current frame still to come in later writes.
    private var remainingInFrame = 0

    init(connection: SimulatorConnection) {
        self.connection = connection
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var data = unwrapOutboundIn(data)
        switch data {
        case .fileRegion(let region):
            remainingInFrame = max(0, remainingInFrame - region.readableBytes)
        case .byteBuffer(var buffer):
            var offset = buffer.readerIndex
            let end = buffer.writerIndex
            if remainingInFrame > 0 {
                let skipped = min(remainingInFrame, end - offset)
                remainingInFrame -= skipped
                offset += skipped
            }
            var modified = false
            while offset + 9 <= end {
                let length = Int(buffer.getInteger(at: offset, as: UInt32.self)! >> 8)
                let type = buffer.getInteger(at: offset + 3, as: UInt8.self)!
                let flags = buffer.getInteger(at: offset + 4, as: UInt8.self)!
                let payloadStart = offset + 9
                if type == 0x4 && flags & 0x1 == 0 && payloadStart + length <= end {
                    var entry = payloadStart
                    while entry + 6 <= payloadStart + length {
                        if buffer.getInteger(at: entry, as: UInt16.self) == 0x3 {
                            buffer.setInteger(UInt32(connection.advertisedLimit), at: entry + 2)
                            modified = true
                        }
                        entry += 6
                    }
                }
                let frameEnd = payloadStart + length
                if frameEnd > end { remainingInFrame = frameEnd - end }
                offset = frameEnd
            }
            if modified { data = .byteBuffer(buffer) }
        }
        context.write(wrapOutboundOut(data), promise: promise)
    }
}

/// Sits first in the pipeline, below TLS, so the fault injector can drop a connection without a TLS
/// close_notify or GOAWAY, like a network failure.
final class AbruptCloseHandler: ChannelOutboundHandler {
    typealias OutboundIn = NIOAny
    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func closeAbruptly() {
        context?.close(mode: .all, promise: nil)
    }
}

/// Watches stream-0 frames and closes the connection on connection-level errors (stream errors only affect
/// their stream).
final class ConnectionErrorHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    private let connection: SimulatorConnection

    init(connection: SimulatorConnection) {
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Stream-0 frames (SETTINGS, PING, GOAWAY) pass down here; only the client's first SETTINGS ACK matters.
        if case .settings(.ack) = unwrapInboundIn(data).payload {
            connection.settingsAcknowledged()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.connectionClosed()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTP2Errors.StreamError { return }
        context.close(promise: nil)
    }
}
