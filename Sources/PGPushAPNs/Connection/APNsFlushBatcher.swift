import NIOCore

/// Sits between TLS and HTTP/2 in a connection's pipeline and holds flushes while a batch of new streams is
/// written, so a batch costs one run of TLS records and one write syscall instead of one per request.
///
/// Only the connection's event loop touches it; outside a batch every flush passes straight through.
final class APNsFlushBatcher: ChannelOutboundHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private var context: ChannelHandlerContext?
    private var holding = false
    private var flushHeld = false

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func flush(context: ChannelHandlerContext) {
        if holding {
            flushHeld = true
        } else {
            context.flush()
        }
    }

    /// Runs `body` with flushes held, then flushes once if anything inside asked for it.
    func batch(_ body: () -> Void) {
        precondition(!holding, "batches do not nest")
        holding = true
        body()
        holding = false
        if flushHeld {
            flushHeld = false
            context?.flush()
        }
    }
}
