import NIOCore

/// The request deadlines of one connection, checked by one repeating sweep instead of one timer per stream:
/// with a thousand streams in flight, per-stream timers cost a heap insertion and a linear-time cancel each.
///
/// Only the connection's event loop touches it. A deadline fires at most one sweep interval late.
final class APNsStreamDeadlines {
    private var active: [ObjectIdentifier: APNsStreamHandler] = [:]

    init() {
        active.reserveCapacity(1024)
    }

    func track(_ handler: APNsStreamHandler) {
        active[ObjectIdentifier(handler)] = handler
    }

    func untrack(_ handler: APNsStreamHandler) {
        active.removeValue(forKey: ObjectIdentifier(handler))
    }

    /// Times out every stream whose deadline has passed.
    func sweep(now: NIODeadline) {
        guard !active.isEmpty else { return }
        let expired = active.values.filter { $0.deadline <= now }
        for handler in expired { handler.deadlinePassed() }
    }

    /// How often a connection sweeps for a given request timeout: a tenth of it, between 10 ms and 1 s.
    static func sweepInterval(forTimeout timeout: TimeAmount) -> TimeAmount {
        let tenth = timeout.nanoseconds / 10
        return .nanoseconds(min(max(tenth, 10_000_000), 1_000_000_000))
    }
}
