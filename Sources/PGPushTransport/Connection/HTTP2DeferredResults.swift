import NIOCore

/// Stream results wait until the event loop has finished what it is doing, then are delivered together.
///
/// A stream can end inside NIO's frame processing before the GOAWAY that dropped it reaches the pool;
/// delivering later lets the state machine learn of the GOAWAY first, so the stream is labelled "not
/// processed" correctly. One task per batch instead of one per result. Only the event loop touches it.
final class HTTP2DeferredResults {
    private let eventLoop: any EventLoop
    private var pending: [(HTTP2StreamResult, @Sendable (HTTP2StreamResult) -> Void)] = []

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        pending.reserveCapacity(256)
    }

    func deliver(_ result: HTTP2StreamResult, to onResult: @escaping @Sendable (HTTP2StreamResult) -> Void) {
        pending.append((result, onResult))
        if pending.count == 1 {
            eventLoop.assumeIsolated().execute { self.deliverPending() }
        }
    }

    private func deliverPending() {
        var batch: [(HTTP2StreamResult, @Sendable (HTTP2StreamResult) -> Void)] = []
        batch.reserveCapacity(pending.count)
        swap(&batch, &pending)
        for (result, onResult) in batch { onResult(result) }
    }
}
