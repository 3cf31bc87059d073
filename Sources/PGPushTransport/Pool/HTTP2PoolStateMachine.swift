import PGPushCore

/// Why a connection attempt failed; the detail never contains credentials.
struct HTTP2ConnectFailure: Error, Sendable, Hashable, CustomStringConvertible {
    var detail: String
    /// Set when the failure is a TLS rejection that reconnecting cannot fix.
    var tlsRejection: String? = nil
    var description: String { detail }

    /// What the callers waiting for a stream are told.
    var noResponseReason: ProviderNoResponseReason {
        tlsRejection.map { .tlsRejected(reason: $0) } ?? .connectFailed(detail: detail)
    }
}

/// The decisions of an ``HTTP2ConnectionPool`` as a pure value: which connection a caller's stream goes on,
/// which waiting caller gets a freed slot, when a connection is retired, closed or forgotten, and what
/// waiting callers are told when no connection can be had.
///
/// It knows connections and waiters only by id. The pool keeps the channels, promises and continuations
/// in its own maps under the same lock, feeds events in, and carries out the returned ``Action``s after
/// the lock is released. Each connection's own life (stream limits, GOAWAY, pings) is an
/// ``HTTP2ConnectionStateMachine`` held here.
struct HTTP2PoolStateMachine: Sendable {
    typealias ConnectionID = Int
    typealias WaiterID = Int

    /// What the pool must do after an event.
    enum Action: Sendable, Hashable {
        /// Resume the waiter with a stream slot, already reserved, on the connection.
        case leaseToWaiter(WaiterID, ConnectionID)
        /// Resume the waiter without a slot.
        case failWaiter(WaiterID, ProviderNoResponseReason)
        /// The connection finished the HTTP/2 preface: its attempt succeeded.
        case connectionReady(ConnectionID)
        /// The connection will never become ready: its attempt failed.
        case connectionFailed(ConnectionID, HTTP2ConnectFailure)
        /// The connection takes no new streams: a replacement may be opened.
        case connectionRetired(ConnectionID)
        /// Close the connection's channel.
        case closeConnection(ConnectionID)
        /// Write a PING with this payload on the connection and arm its timeout.
        case sendPing(ConnectionID, payload: UInt64)
        /// The connection is gone for good: drop its channel and promises.
        case forgetConnection(ConnectionID)
    }

    /// The answer to a caller that wants a stream slot now.
    enum LeaseResult: Sendable, Hashable {
        /// A slot is reserved on this connection.
        case leased(ConnectionID)
        /// No slot can be had: the pool is shut down, or connecting failed and no connection is ready.
        case failed(ProviderNoResponseReason)
        /// The caller must wait for a ``Action/leaseToWaiter(_:_:)`` or ``Action/failWaiter(_:_:)``.
        case mustWait
    }

    struct Connection: Sendable {
        var machine: HTTP2ConnectionStateMachine
        /// The channel is up and the pool holds it; only attached connections take streams.
        var attached = false
        var readySignalled = false
        var retiredSignalled = false
        /// Close as soon as the channel is attached (retired while the TCP connect was still running).
        var closeWhenAttached = false
    }

    private enum Waiter: Sendable {
        /// The caller has an id but has not suspended yet.
        case reserved
        /// Cancelled before it suspended; it must not wait.
        case cancelled
        case waiting
    }

    static let shutDownReason = ProviderNoResponseReason.connectFailed(detail: "the connection pool is shut down")
    static let cancelledReason = ProviderNoResponseReason.connectFailed(detail: "cancelled while waiting for a stream")

    private(set) var connections: [ConnectionID: Connection] = [:]
    private var waiters: [WaiterID: Waiter] = [:]
    /// FIFO of waiter ids; ids no longer waiting are skipped.
    private var waitQueue: [WaiterID] = []
    private var waitQueueHead = 0
    private(set) var waitingCount = 0
    private var nextID = 0
    private(set) var isShuttingDown = false
    /// Set when an attempt failed and no connection is ready; callers then fail fast instead of waiting.
    private(set) var lastConnectFailure: ProviderNoResponseReason?
    private var statistics = HTTP2PoolStatistics()

    let clientCap: Int
    let singleStreamUntilFirstSuccess: Bool

    /// - Parameters:
    ///   - clientCap: The client's ceiling on concurrent streams per connection.
    ///   - singleStreamUntilFirstSuccess: APNs token authentication: one stream per connection until a request succeeds.
    init(clientCap: Int, singleStreamUntilFirstSuccess: Bool) {
        self.clientCap = clientCap
        self.singleStreamUntilFirstSuccess = singleStreamUntilFirstSuccess
    }

    private mutating func makeID() -> Int {
        nextID += 1
        return nextID
    }

    var isEmpty: Bool { connections.isEmpty }

    var hasReadyConnection: Bool {
        connections.values.contains { $0.attached && $0.machine.isReady }
    }

    // MARK: - Connection attempts

    /// A slot of the pool starts a connection attempt; `isReplacement` when it replaces an earlier one.
    mutating func connectRequested(isReplacement: Bool) -> ConnectionID {
        if isReplacement { statistics.reconnects += 1 }
        let id = makeID()
        connections[id] = Connection(machine: HTTP2ConnectionStateMachine(
            clientCap: clientCap, singleStreamUntilFirstSuccess: singleStreamUntilFirstSuccess))
        return id
    }

    /// TCP is up and the pool holds the channel. The server's SETTINGS may have arrived already; the slots
    /// they opened could not be handed out then, so they are handed out now.
    mutating func connectionAttached(_ id: ConnectionID) -> [Action] {
        guard connections[id] != nil else { return [.closeConnection(id), .forgetConnection(id)] }
        connections[id]!.attached = true
        var actions: [Action] = []
        grantWaiters(&actions)
        if connections[id]!.closeWhenAttached { actions.append(.closeConnection(id)) }
        return actions
    }

    /// The attempt failed (TCP, TLS, or no SETTINGS in time). Waiting callers fail too when no connection is ready.
    mutating func connectFailed(_ id: ConnectionID, _ failure: HTTP2ConnectFailure) -> [Action] {
        statistics.connectFailures += 1
        var actions: [Action] = []
        if let connection = connections[id] {
            if connection.attached {
                actions.append(.closeConnection(id))  // the closed event removes it
            } else {
                connections[id] = nil
                // Every attempt ends, even for a connection that never existed.
                actions.append(.connectionFailed(id, failure))
                actions.append(.connectionRetired(id))
                actions.append(.forgetConnection(id))
            }
        }
        if !hasReadyConnection {
            lastConnectFailure = failure.noResponseReason
            failWaiters(failure.noResponseReason, &actions)
        }
        return actions
    }

    // MARK: - Connection events

    /// A SETTINGS frame; `maxConcurrentStreams` is `nil` when it did not carry that setting. The first one
    /// makes the connection ready.
    mutating func settingsReceived(_ id: ConnectionID, maxConcurrentStreams: Int?) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        let action = connections[id]!.machine.settingsReceived(maxConcurrentStreams: maxConcurrentStreams)
        if connections[id]!.machine.isReady, !connections[id]!.readySignalled {
            connections[id]!.readySignalled = true
            actions.append(.connectionReady(id))
            lastConnectFailure = nil
        }
        afterConnectionEvent(id, action, &actions)
        return actions
    }

    /// A GOAWAY: the connection drains; streams above `lastStreamID` end unprocessed.
    mutating func goAwayReceived(_ id: ConnectionID, lastStreamID: Int, errorCode: UInt32, debugData: String?) -> [Action] {
        guard connections[id] != nil else { return [] }
        statistics.goAwaysReceived += 1
        var actions: [Action] = []
        let action = connections[id]!.machine.goAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData)
        afterConnectionEvent(id, action, &actions)
        return actions
    }

    /// The JSON `reason` of the first GOAWAY on the connection that carried one.
    func goAwayDebugReason(_ id: ConnectionID) -> String? {
        connections[id]?.machine.goAwayDebugReason
    }

    mutating func pingAckReceived(_ id: ConnectionID, payload: UInt64) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        connections[id]!.machine.pingAckReceived(payload)
        afterConnectionEvent(id, .none, &actions)
        return actions
    }

    /// The channel closed; `failure` says why when it never became ready.
    mutating func channelClosed(_ id: ConnectionID, failure: HTTP2ConnectFailure) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        let action = connections[id]!.machine.channelClosed()
        if !connections[id]!.readySignalled {
            connections[id]!.readySignalled = true
            actions.append(.connectionFailed(id, failure))
        }
        afterConnectionEvent(id, action, &actions)
        return actions
    }

    /// The connection's PING timer fired.
    mutating func pingDue(_ id: ConnectionID) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        apply(connections[id]!.machine.pingDue(), to: id, &actions)
        return actions
    }

    /// The timeout armed for PING `payload` fired.
    mutating func pingTimedOut(_ id: ConnectionID, payload: UInt64) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        apply(connections[id]!.machine.pingTimeoutFired(payload), to: id, &actions)
        grantWaiters(&actions)
        return actions
    }

    private mutating func afterConnectionEvent(_ id: ConnectionID, _ action: HTTP2ConnectionStateMachine.Action, _ actions: inout [Action]) {
        apply(action, to: id, &actions)
        removeIfFinished(id, &actions)
        grantWaiters(&actions)
    }

    // MARK: - Streams

    /// A caller wants a slot now: a slot, a failure, or ``LeaseResult/mustWait``.
    mutating func leaseRequested() -> LeaseResult {
        if isShuttingDown { return .failed(Self.shutDownReason) }
        if waitingCount == 0, let id = reserveSlot() { return .leased(id) }
        if let lastConnectFailure, !hasReadyConnection { return .failed(lastConnectFailure) }
        return .mustWait
    }

    /// A caller that got ``LeaseResult/mustWait`` takes a waiter id before it suspends.
    mutating func waiterAdded() -> WaiterID {
        let id = makeID()
        waiters[id] = .reserved
        return id
    }

    /// The waiter is about to suspend. It is re-checked under the same lock hold: a slot may have freed
    /// since ``leaseRequested()``. With ``LeaseResult/mustWait`` the waiter now waits in line.
    mutating func waiterSuspending(_ id: WaiterID) -> LeaseResult {
        if case .cancelled = waiters[id] {
            waiters[id] = nil
            return .failed(Self.cancelledReason)
        }
        let immediate = leaseRequested()
        if case .mustWait = immediate {
            waiters[id] = .waiting
            waitQueue.append(id)
            waitingCount += 1
        } else {
            waiters[id] = nil
        }
        return immediate
    }

    /// The waiter's task was cancelled.
    mutating func waiterCancelled(_ id: WaiterID) -> Action? {
        switch waiters[id] {
        case .reserved:
            waiters[id] = .cancelled
            return nil
        case .waiting:
            waiters[id] = nil
            waitingCount -= 1
            return .failWaiter(id, Self.cancelledReason)
        case .cancelled, nil:
            return nil
        }
    }

    /// A stream ended. Returns what the caller is told and what the pool must do; `retiresConnection` is set
    /// for an answer after which the provider expects a fresh connection.
    mutating func streamClosed(
        _ id: ConnectionID, result: HTTP2StreamResult, retiresConnection: Bool
    ) -> (outcome: ProviderOutcome, actions: [Action]) {
        // Mutated in place: copying the entry out and back costs retains on every request.
        guard connections[id] != nil else { return (.noResponse(.connectionClosed), []) }
        let outcome: ProviderOutcome
        switch result {
        case .response(let response):
            outcome = .response(response)
        case .timedOut:
            outcome = .noResponse(.timeout)
        case .closed(let streamID, let resetCode, let sawHeadersWithoutStatus):
            outcome = sawHeadersWithoutStatus
                ? .noResponse(.missingStatus)
                : .noResponse(connections[id]!.machine.noResponseReason(streamID: streamID, resetCode: resetCode))
        }
        var actions: [Action] = []
        let completed = connections[id]!.machine.streamCompleted(status: outcome.status == 0 ? nil : outcome.status)
        apply(completed, to: id, &actions)
        if retiresConnection, case .response(let response) = outcome, let reason = response.reason {
            apply(connections[id]!.machine.retire(.response(reason: reason)), to: id, &actions)
        }
        removeIfFinished(id, &actions)
        grantWaiters(&actions)
        return (outcome, actions)
    }

    // MARK: - Shutdown

    /// Stops new work: fails waiting callers and retires every connection (each closes when its last stream ends).
    mutating func shutdown() -> [Action] {
        guard !isShuttingDown else { return [] }
        isShuttingDown = true
        var actions: [Action] = []
        failWaiters(Self.shutDownReason, &actions)
        for id in connections.keys.sorted() {
            apply(connections[id]!.machine.retire(.poolShutdown), to: id, &actions)
        }
        return actions
    }

    // MARK: - Slots and waiters

    /// Reserves a slot on the attached connection with the most free slots.
    private mutating func reserveSlot() -> ConnectionID? {
        var best: (id: Int, free: Int)?
        for (id, connection) in connections where connection.attached {
            let free = connection.machine.effectiveLimit - connection.machine.inFlight
            if free > 0, free > (best?.free ?? 0) { best = (id, free) }
        }
        guard let best else { return nil }
        connections[best.id]!.machine.streamOpened()
        statistics.requestsSent += 1
        statistics.peakStreamsPerConnection = max(statistics.peakStreamsPerConnection, connections[best.id]!.machine.inFlight)
        return best.id
    }

    private mutating func popWaiter() -> WaiterID? {
        while waitQueueHead < waitQueue.count {
            let id = waitQueue[waitQueueHead]
            waitQueueHead += 1
            if case .waiting = waiters[id] {
                waiters[id] = nil
                waitingCount -= 1
                compactQueueIfNeeded()
                return id
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
    private mutating func grantWaiters(_ actions: inout [Action]) {
        while waitingCount > 0, let id = reserveSlot() {
            guard let waiter = popWaiter() else {
                // No live waiter after all: give the slot back.
                _ = connections[id]!.machine.streamCompleted(status: nil)
                statistics.requestsSent -= 1
                return
            }
            actions.append(.leaseToWaiter(waiter, id))
        }
    }

    /// Fails every waiting caller, for a failed connect with no ready connection, or shutdown.
    private mutating func failWaiters(_ reason: ProviderNoResponseReason, _ actions: inout [Action]) {
        while let waiter = popWaiter() {
            actions.append(.failWaiter(waiter, reason))
        }
    }

    // MARK: - Connection actions

    /// Translates a connection state machine's action for connection `id`.
    private mutating func apply(_ action: HTTP2ConnectionStateMachine.Action, to id: ConnectionID, _ actions: inout [Action]) {
        switch action {
        case .none, .streamSlotsAvailable:
            break  // grantWaiters runs after every event that frees slots
        case .retire:
            signalRetired(id, &actions)
        case .retireAndClose:
            signalRetired(id, &actions)
            closeChannel(id, &actions)
        case .close:
            closeChannel(id, &actions)
        case .sendPing(let payload):
            if connections[id]?.attached == true { actions.append(.sendPing(id, payload: payload)) }
        }
    }

    private mutating func signalRetired(_ id: ConnectionID, _ actions: inout [Action]) {
        guard connections[id]?.retiredSignalled == false else { return }
        connections[id]!.retiredSignalled = true
        actions.append(.connectionRetired(id))
    }

    private mutating func closeChannel(_ id: ConnectionID, _ actions: inout [Action]) {
        if connections[id]?.attached == true {
            actions.append(.closeConnection(id))
        } else {
            connections[id]?.closeWhenAttached = true
        }
    }

    /// Drops a closed connection once its last stream has reported.
    private mutating func removeIfFinished(_ id: ConnectionID, _ actions: inout [Action]) {
        guard let connection = connections[id], connection.machine.isClosed, connection.machine.inFlight == 0 else { return }
        if !connection.readySignalled {
            actions.append(.connectionFailed(id, HTTP2ConnectFailure(detail: "connection closed before HTTP/2 was ready")))
        }
        if !connection.retiredSignalled { actions.append(.connectionRetired(id)) }
        actions.append(.forgetConnection(id))
        connections[id] = nil
    }

    // MARK: - Statistics

    func snapshot() -> HTTP2PoolStatistics {
        var result = statistics
        var open = 0, ready = 0, inFlight = 0
        var limits: [Int] = []
        for (_, connection) in connections.sorted(by: { $0.key < $1.key }) where connection.attached {
            inFlight += connection.machine.inFlight
            switch connection.machine.state {
            case .ready:
                open += 1
                ready += 1
                limits.append(connection.machine.effectiveLimit)
            case .draining:
                if connection.readySignalled { open += 1 }
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
