import NIOCore

/// The request deadlines of one connection, checked by one repeating sweep instead of one timer per stream:
/// with a thousand streams in flight, per-stream timers cost a heap insertion and a linear-time cancel each.
///
/// Only the connection's event loop touches it. A deadline fires at most one sweep interval late.
final class APNsStreamDeadlines {
    /// Unordered; each handler knows its own index, so tracking and untracking are O(1).
    private var active: [APNsStreamHandler] = []

    init() {
        active.reserveCapacity(1024)
    }

    func track(_ handler: APNsStreamHandler) {
        precondition(handler.deadlineSlot == nil, "a stream is tracked once")
        handler.deadlineSlot = active.count
        active.append(handler)
    }

    func untrack(_ handler: APNsStreamHandler) {
        guard let slot = handler.deadlineSlot else { return }
        handler.deadlineSlot = nil
        let last = active.removeLast()
        if slot < active.count {
            active[slot] = last
            last.deadlineSlot = slot
        }
    }

    /// Times out every stream whose deadline has passed.
    func sweep(now: NIODeadline) {
        guard !active.isEmpty else { return }
        let expired = active.filter { $0.deadline <= now }
        for handler in expired { handler.deadlinePassed() }
    }

    /// How often a connection sweeps for a given request timeout: a tenth of it, between 10 ms and 1 s.
    static func sweepInterval(forTimeout timeout: TimeAmount) -> TimeAmount {
        let tenth = timeout.nanoseconds / 10
        return .nanoseconds(min(max(tenth, 10_000_000), 1_000_000_000))
    }
}

/// Stream results wait until the event loop has finished what it is doing, then are delivered together.
///
/// A stream reports from inside NIO's frame processing, but a GOAWAY that dropped it reaches the connection
/// observer only after that; delivering later lets the state machine learn of the GOAWAY first, so the
/// stream is labelled "not processed" correctly. One task per batch instead of one per result.
final class APNsDeferredResults {
    private let eventLoop: any EventLoop
    private var pending: [(APNsStreamResult, @Sendable (APNsStreamResult) -> Void)] = []

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        pending.reserveCapacity(256)
    }

    func deliver(_ result: APNsStreamResult, to onResult: @escaping @Sendable (APNsStreamResult) -> Void) {
        pending.append((result, onResult))
        if pending.count == 1 {
            eventLoop.assumeIsolated().execute { self.deliverPending() }
        }
    }

    private func deliverPending() {
        var batch: [(APNsStreamResult, @Sendable (APNsStreamResult) -> Void)] = []
        batch.reserveCapacity(pending.count)
        swap(&batch, &pending)
        for (result, onResult) in batch { onResult(result) }
    }
}
