import NIOCore
import PGPushCore

/// A reserved stream slot on one connection.
struct HTTP2StreamLease: Sendable {
    let connectionID: Int
    let connection: HTTP2Connection
}

/// What a waiting caller is resumed with.
enum HTTP2SlotGrant: Sendable {
    case granted(HTTP2StreamLease)
    case failed(ProviderNoResponseReason)
}

/// Side effects collected under the pool lock and performed after it is released.
struct HTTP2PoolEffects {
    var grants: [(CheckedContinuation<HTTP2SlotGrant, Never>, HTTP2SlotGrant)] = []
    var close: [HTTP2Connection] = []
    var retired: [EventLoopPromise<Void>] = []
    var readySucceeded: [EventLoopPromise<Void>] = []
    var readyFailed: [(EventLoopPromise<Void>, HTTP2ConnectFailure)] = []
    var pings: [(HTTP2Connection, UInt64)] = []

    func perform(pingTimeout: TimeAmount, onPingTimeout: @escaping @Sendable (Int, UInt64) -> Void) {
        for (continuation, grant) in grants { continuation.resume(returning: grant) }
        for promise in readySucceeded { promise.succeed(()) }
        for (promise, failure) in readyFailed { promise.fail(failure) }
        for promise in retired { promise.succeed(()) }
        for connection in close { connection.close() }
        for (connection, payload) in pings {
            connection.sendPing(payload)
            let id = connection.id
            connection.eventLoop.scheduleTask(in: pingTimeout) { onPingTimeout(id, payload) }
        }
    }
}

/// Why a connection attempt failed; the detail never contains credentials.
struct HTTP2ConnectFailure: Error, CustomStringConvertible {
    var detail: String
    /// Set when the failure is a TLS rejection that reconnecting cannot fix.
    var tlsRejection: String? = nil
    var description: String { detail }

    /// What the callers waiting for a stream are told.
    var noResponseReason: ProviderNoResponseReason {
        tlsRejection.map { .tlsRejected(reason: $0) } ?? .connectFailed(detail: detail)
    }
}

/// Everything the pool guards with its lock: the connections' state machines and the queue of waiting callers.
struct HTTP2PoolState {
    struct Entry {
        let id: Int
        var connection: HTTP2Connection?
        var machine: HTTP2ConnectionStateMachine
        let ready: EventLoopPromise<Void>
        var readySignalled = false
        let retired: EventLoopPromise<Void>
        var retiredSignalled = false
        /// Close as soon as the channel is attached (retired while the TCP connect was still running).
        var closeWhenAttached = false
    }

    enum Waiter {
        /// The caller has an id but has not suspended yet.
        case reserved
        /// Cancelled before it suspended; it must not wait.
        case cancelled
        case waiting(CheckedContinuation<HTTP2SlotGrant, Never>)
    }

    var entries: [Int: Entry] = [:]
    var waiters: [Int: Waiter] = [:]
    /// FIFO of waiter ids; ids no longer in `waiters` are skipped.
    var waitQueue: [Int] = []
    var waitQueueHead = 0
    var waitingCount = 0
    var nextID = 0
    var shuttingDown = false
    /// Set when an attempt failed and no connection is ready; callers then fail fast instead of waiting.
    var lastConnectFailure: ProviderNoResponseReason?
    var statistics = HTTP2PoolStatistics()

    mutating func makeID() -> Int {
        nextID += 1
        return nextID
    }

    // MARK: - Slots

    /// Reserves a slot on the ready connection with the most free slots.
    mutating func reserveSlot() -> HTTP2StreamLease? {
        var best: (id: Int, free: Int)?
        for (id, entry) in entries where entry.connection != nil {
            let free = entry.machine.effectiveLimit - entry.machine.inFlight
            if free > 0, free > (best?.free ?? 0) { best = (id, free) }
        }
        guard let best, let connection = entries[best.id]?.connection else { return nil }
        entries[best.id]!.machine.streamOpened()
        statistics.requestsSent += 1
        statistics.peakStreamsPerConnection = max(statistics.peakStreamsPerConnection, entries[best.id]!.machine.inFlight)
        return HTTP2StreamLease(connectionID: best.id, connection: connection)
    }

    var hasReadyConnection: Bool {
        entries.values.contains { $0.connection != nil && $0.machine.isReady }
    }

    /// Either a slot now, a failure now, or nil: the caller must wait.
    mutating func acquireImmediately() -> HTTP2SlotGrant? {
        if shuttingDown { return .failed(.connectFailed(detail: "the connection pool is shut down")) }
        if waitingCount == 0, let lease = reserveSlot() { return .granted(lease) }
        if let lastConnectFailure, !hasReadyConnection { return .failed(lastConnectFailure) }
        return nil
    }

    mutating func enqueueWaiter(_ id: Int, _ continuation: CheckedContinuation<HTTP2SlotGrant, Never>) -> HTTP2SlotGrant? {
        if case .cancelled = waiters[id] {
            waiters[id] = nil
            return .failed(.connectFailed(detail: "cancelled while waiting for a stream"))
        }
        // Re-check under the same lock hold: a slot may have freed since the fast path.
        if let immediate = acquireImmediately() {
            waiters[id] = nil
            return immediate
        }
        waiters[id] = .waiting(continuation)
        waitQueue.append(id)
        waitingCount += 1
        return nil
    }

    mutating func cancelWaiter(_ id: Int, effects: inout HTTP2PoolEffects) {
        switch waiters[id] {
        case .reserved:
            waiters[id] = .cancelled
        case .waiting(let continuation):
            waiters[id] = nil
            waitingCount -= 1
            effects.grants.append((continuation, .failed(.connectFailed(detail: "cancelled while waiting for a stream"))))
        case .cancelled, nil:
            break
        }
    }

    private mutating func popWaiter() -> CheckedContinuation<HTTP2SlotGrant, Never>? {
        while waitQueueHead < waitQueue.count {
            let id = waitQueue[waitQueueHead]
            waitQueueHead += 1
            if case .waiting(let continuation) = waiters[id] {
                waiters[id] = nil
                waitingCount -= 1
                compactQueueIfNeeded()
                return continuation
            }
        }
        compactQueueIfNeeded()
        return nil
    }

    private mutating func compactQueueIfNeeded() {
        if waitQueueHead == waitQueue.count {
            waitQueue.removeAll(keepingCapacity: true)
            waitQueueHead = 0
        } else if waitQueueHead > 1024, waitQueueHead * 2 > waitQueue.count {
            waitQueue.removeFirst(waitQueueHead)
            waitQueueHead = 0
        }
    }

    /// Hands free slots to waiting callers, oldest first.
    mutating func grantWaiters(effects: inout HTTP2PoolEffects) {
        while waitingCount > 0, let lease = reserveSlot() {
            guard let continuation = popWaiter() else {
                // No live waiter after all: give the slot back.
                _ = entries[lease.connectionID]!.machine.streamCompleted(status: nil)
                statistics.requestsSent -= 1
                return
            }
            effects.grants.append((continuation, .granted(lease)))
        }
    }

    /// Fails every waiting caller, for a failed connect with no ready connection, or shutdown.
    mutating func failWaiters(_ reason: ProviderNoResponseReason, effects: inout HTTP2PoolEffects) {
        while let continuation = popWaiter() {
            effects.grants.append((continuation, .failed(reason)))
        }
    }

    // MARK: - Connection actions

    /// Carries out a state machine action for connection `id`.
    mutating func apply(_ action: HTTP2ConnectionStateMachine.Action, to id: Int, effects: inout HTTP2PoolEffects) {
        guard var entry = entries[id] else { return }
        switch action {
        case .none:
            break
        case .streamSlotsAvailable:
            break  // grantWaiters runs after every event
        case .retire:
            signalRetired(&entry, effects: &effects)
        case .retireAndClose:
            signalRetired(&entry, effects: &effects)
            closeChannel(&entry, effects: &effects)
        case .close:
            closeChannel(&entry, effects: &effects)
        case .sendPing(let payload):
            if let connection = entry.connection { effects.pings.append((connection, payload)) }
        }
        entries[id] = entry
    }

    private func signalRetired(_ entry: inout Entry, effects: inout HTTP2PoolEffects) {
        guard !entry.retiredSignalled else { return }
        entry.retiredSignalled = true
        effects.retired.append(entry.retired)
    }

    private func closeChannel(_ entry: inout Entry, effects: inout HTTP2PoolEffects) {
        if let connection = entry.connection {
            effects.close.append(connection)
        } else {
            entry.closeWhenAttached = true
        }
    }

    /// Drops a closed connection once its last stream has reported.
    mutating func removeIfFinished(_ id: Int, effects: inout HTTP2PoolEffects) {
        guard let entry = entries[id], entry.machine.isClosed, entry.machine.inFlight == 0 else { return }
        if !entry.readySignalled { effects.readyFailed.append((entry.ready, HTTP2ConnectFailure(detail: "connection closed before HTTP/2 was ready"))) }
        if !entry.retiredSignalled { effects.retired.append(entry.retired) }
        entries[id] = nil
    }

    func snapshot() -> HTTP2PoolStatistics {
        var result = statistics
        var open = 0, ready = 0, inFlight = 0
        var limits: [Int] = []
        for entry in entries.values.sorted(by: { $0.id < $1.id }) where entry.connection != nil {
            inFlight += entry.machine.inFlight
            switch entry.machine.state {
            case .ready:
                open += 1
                ready += 1
                limits.append(entry.machine.effectiveLimit)
            case .draining:
                if entry.readySignalled { open += 1 }
            case .connecting, .closed:
                break
            }
        }
        result.connectionsOpen = open
        result.connectionsReady = ready
        result.streamsInFlight = inFlight
        result.callersWaiting = waitingCount
        result.effectiveStreamLimits = limits
        return result
    }
}
