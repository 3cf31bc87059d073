import PGPushCore

/// Why a connection attempt failed; the detail never contains credentials.
struct HTTP2ConnectFailure: Error, Sendable, Hashable, CustomStringConvertible {
    var detail: String
    /// Set when the failure is a TLS rejection that reconnecting cannot fix.
    var tlsRejection: String? = nil
    /// Logged at debug level: reported elsewhere already (a proxy's refusal, by its ``HTTPProxyStatus``).
    var quiet = false
    var description: String { detail }

    /// What the callers waiting for a stream are told.
    var noResponseReason: ProviderNoResponseReason {
        tlsRejection.map { .tlsRejected(reason: $0) } ?? .connectFailed(detail: detail)
    }
}

/// The decisions of an ``HTTP2ConnectionPool`` as a pure value: which connection a caller's stream goes on,
/// which waiting caller gets a freed slot, when a connection is opened, retired, closed or forgotten, what
/// waiting callers are told when no connection can be had, and every timer of the pool's runtime: the connect
/// timeout, the reconnect back-off, the PING interval and timeout, and the drain deadline at shutdown.
///
/// It knows connections, waiters and timers only by id, and time only as timers it asks for: it returns
/// ``Action/scheduleTimer(_:)`` and ``Action/cancelTimer(_:)``, and hears ``timerFired(_:)`` when one is due
/// (as PostgresNIO's `PoolStateMachine` does). The pool keeps the connections, continuations and timer tasks
/// in its own maps under the same lock, feeds events in, and carries out the returned ``Action``s after the
/// lock is released. Each connection's own life (stream limits, GOAWAY, pings) is an
/// ``HTTP2ConnectionStateMachine`` held here.
///
/// The pool keeps a fixed number of slots, each with one connection at a time: a slot opens a connection,
/// serves on it until it retires, and opens its replacement, after a back-off when attempts fail or
/// connections die young, so the provider never sees rapid connect/close churn.
struct HTTP2PoolStateMachine: Sendable {
    typealias ConnectionID = Int
    typealias WaiterID = Int
    typealias TimerID = Int

    /// The durations the pool's timers run for.
    struct Timing: Sendable {
        /// From TCP up to the server's first SETTINGS (TCP itself is bounded by the connection factory).
        var connectTimeout: Duration = .seconds(10)
        var pingInterval: Duration = .seconds(30)
        var pingTimeout: Duration = .seconds(10)
        /// How long in-flight streams may take to finish after shutdown before their connections are closed.
        var drainTimeout: Duration = .seconds(16)
        /// A connection that retires sooner than this after its attempt began counts as a failed attempt.
        var stableLifetime: Duration = .seconds(10)
        /// The back-off before a slot's next attempt after `consecutiveFailures` (at least 1) failed attempts.
        var backoff: @Sendable (_ consecutiveFailures: Int) -> Duration = { _ in .milliseconds(100) }

        init() {}

        init(_ configuration: HTTP2ClientConfiguration) {
            connectTimeout = configuration.connectTimeout
            pingInterval = configuration.pingInterval
            pingTimeout = configuration.pingTimeout
            drainTimeout = configuration.requestTimeout + .seconds(1)
            let backoff = configuration.reconnectBackoff
            self.backoff = { backoff.delay(afterFailures: $0 - 1) }
        }
    }

    /// A timer the pool runs for the state machine: after `duration`, the pool calls ``timerFired(_:)``
    /// unless ``Action/cancelTimer(_:)`` named `id` first.
    struct Timer: Sendable, Hashable {
        enum Kind: Sendable, Hashable {
            /// The connection is attached but has not received the server's SETTINGS.
            case connectTimeout(ConnectionID)
            /// The connection has lived long enough that its retirement is not a failed attempt.
            case stableLifetime(ConnectionID)
            /// Time to send the connection a PING.
            case pingInterval(ConnectionID)
            /// The PING with `payload` went unanswered.
            case pingTimeout(ConnectionID, payload: UInt64)
            /// The slot's back-off is over: open its next connection.
            case backoff(slot: Int)
            /// The shutdown's drain is over: close what is left.
            case drain
        }

        var id: TimerID
        var kind: Kind
        var duration: Duration
    }

    /// What the pool must do after an event.
    enum Action: Sendable, Hashable {
        /// Resume the waiter with a stream slot, already reserved, on the connection.
        case leaseToWaiter(WaiterID, ConnectionID)
        /// Resume the waiter without a slot.
        case failWaiter(WaiterID, ProviderNoResponseReason)
        /// Open a connection with this id, then report ``connectionAttached(_:)`` or ``connectFailed(_:_:)``.
        case openConnection(ConnectionID)
        /// The connection finished the HTTP/2 preface (for the log).
        case connectionReady(ConnectionID)
        /// The connection attempt failed: it never became ready (for the log).
        case connectionFailed(ConnectionID, HTTP2ConnectFailure)
        /// Close the connection's channel.
        case closeConnection(ConnectionID)
        /// Write a PING with this payload on the connection (its timeout is a timer of its own).
        case sendPing(ConnectionID, payload: UInt64)
        /// The connection is gone for good: drop it.
        case forgetConnection(ConnectionID)
        /// Start the timer; report ``timerFired(_:)`` when it is due.
        case scheduleTimer(Timer)
        /// Stop the timer; it must not fire (a late ``timerFired(_:)`` is ignored).
        case cancelTimer(TimerID)
        /// Shutdown is over: no connection is left (or every one is closed after the drain deadline) and no
        /// timer runs. The pool's run ends.
        case shutdownComplete
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
        enum Attempt: Sendable, Hashable {
            /// Connecting: TCP, TLS, or waiting for the server's SETTINGS.
            case pending
            case ready
            case failed
        }

        var machine: HTTP2ConnectionStateMachine
        /// The slot it serves; `nil` once the slot has moved on (the connection failed or retired).
        var slot: Int?
        var attempt = Attempt.pending
        /// The channel is up and the pool holds it; only attached connections take streams.
        var attached = false
        var retiredSignalled = false
        /// Close as soon as the channel is attached (retired while the TCP connect was still running).
        var closeWhenAttached = false
        /// Lived past ``Timing/stableLifetime``.
        var isStable = false
        var connectTimeoutTimer: TimerID?
        var stableTimer: TimerID?
        var pingIntervalTimer: TimerID?
        var pingTimeoutTimer: (id: TimerID, payload: UInt64)?

        var timers: [TimerID] {
            [connectTimeoutTimer, stableTimer, pingIntervalTimer, pingTimeoutTimer?.id].compactMap { $0 }
        }
    }

    private struct Slot: Sendable {
        enum State: Sendable {
            case connecting(ConnectionID)
            case backingOff(TimerID)
            case stopped
        }

        var state: State
        var consecutiveFailures = 0
        var attempts = 0
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
    static let connectTimeoutFailure = HTTP2ConnectFailure(detail: "no HTTP/2 SETTINGS within the connect timeout")

    private(set) var connections: [ConnectionID: Connection] = [:]
    private var slots: [Slot] = []
    private var waiters: [WaiterID: Waiter] = [:]
    /// FIFO of waiter ids; ids no longer waiting are skipped.
    private var waitQueue: [WaiterID] = []
    private var waitQueueHead = 0
    private(set) var waitingCount = 0
    private var nextID = 0
    private(set) var isShuttingDown = false
    /// The drain deadline passed (or the run was cancelled): connections are closed, not drained.
    private var drainExpired = false
    private var drainTimer: TimerID?
    private(set) var isShutDown = false
    /// Set when an attempt failed and no connection is ready; callers then fail fast instead of waiting.
    private(set) var lastConnectFailure: ProviderNoResponseReason?
    private var statistics = HTTP2PoolStatistics()

    let clientCap: Int
    let singleStreamUntilFirstSuccess: Bool
    let timing: Timing

    /// - Parameters:
    ///   - clientCap: The client's ceiling on concurrent streams per connection.
    ///   - singleStreamUntilFirstSuccess: One stream per connection until a request succeeds (the provider's rules
    ///     say when: ``HTTP2ProviderRules/startsWithSingleStream(_:)``).
    ///   - timing: How long the pool's timers run.
    init(clientCap: Int, singleStreamUntilFirstSuccess: Bool, timing: Timing = Timing()) {
        self.clientCap = clientCap
        self.singleStreamUntilFirstSuccess = singleStreamUntilFirstSuccess
        self.timing = timing
    }

    private mutating func makeID() -> Int {
        nextID += 1
        return nextID
    }

    var isEmpty: Bool { connections.isEmpty }

    var hasReadyConnection: Bool {
        connections.values.contains { $0.attached && $0.machine.isReady }
    }

    // MARK: - Slots and connection attempts

    /// The pool's run begins: every slot opens its first connection.
    mutating func start(slots count: Int) -> [Action] {
        guard slots.isEmpty, !isShuttingDown else { return [] }
        slots = Array(repeating: Slot(state: .stopped), count: max(1, count))
        var actions: [Action] = []
        for slot in slots.indices { openConnection(forSlot: slot, &actions) }
        return actions
    }

    private mutating func openConnection(forSlot slot: Int, _ actions: inout [Action]) {
        if slots[slot].attempts > 0 { statistics.reconnects += 1 }
        slots[slot].attempts += 1
        let id = makeID()
        var connection = Connection(
            machine: HTTP2ConnectionStateMachine(clientCap: clientCap, singleStreamUntilFirstSuccess: singleStreamUntilFirstSuccess),
            slot: slot)
        actions.append(.openConnection(id))
        connection.stableTimer = schedule(.stableLifetime(id), after: timing.stableLifetime, &actions)
        connections[id] = connection
        slots[slot].state = .connecting(id)
    }

    /// The slot's connection failed to connect, or retired after it was ready: open the next one, after a
    /// back-off when attempts keep failing or connections die young.
    private mutating func slotAttemptEnded(_ id: ConnectionID, failed: Bool, _ actions: inout [Action]) {
        guard let slot = connections[id]?.slot else { return }
        connections[id]!.slot = nil
        if let timer = connections[id]!.stableTimer {
            connections[id]!.stableTimer = nil
            actions.append(.cancelTimer(timer))
        }
        let stable = !failed && connections[id]!.isStable
        slots[slot].consecutiveFailures = stable ? 0 : slots[slot].consecutiveFailures + 1
        if isShuttingDown {
            slots[slot].state = .stopped
        } else if slots[slot].consecutiveFailures > 0 {
            let delay = timing.backoff(slots[slot].consecutiveFailures)
            slots[slot].state = .backingOff(schedule(.backoff(slot: slot), after: delay, &actions))
        } else {
            openConnection(forSlot: slot, &actions)
        }
    }

    /// TCP is up and the pool holds the channel. The server's SETTINGS may have arrived already; the slots
    /// they opened could not be handed out then, so they are handed out now. Otherwise the connect timeout
    /// starts: the handshake and the server's SETTINGS must come within it.
    mutating func connectionAttached(_ id: ConnectionID) -> [Action] {
        guard connections[id] != nil else { return [.closeConnection(id), .forgetConnection(id)] }
        connections[id]!.attached = true
        var actions: [Action] = []
        if connections[id]!.attempt == .pending, !connections[id]!.closeWhenAttached {
            connections[id]!.connectTimeoutTimer = schedule(.connectTimeout(id), after: timing.connectTimeout, &actions)
        }
        grantWaiters(&actions)
        if connections[id]!.closeWhenAttached { actions.append(.closeConnection(id)) }
        return actions
    }

    /// Opening the connection failed (TCP, proxy, or the channel's setup): it never got a channel.
    mutating func connectFailed(_ id: ConnectionID, _ failure: HTTP2ConnectFailure) -> [Action] {
        guard let connection = connections[id] else { return [] }
        var actions: [Action] = []
        if connection.attached {
            attemptFailed(id, failure, &actions)
            closeChannel(id, &actions)  // the closed event removes it
        } else {
            attemptFailed(id, failure, &actions)
            cancelTimers(of: id, &actions)
            connections[id] = nil
            actions.append(.forgetConnection(id))
        }
        checkShutdownComplete(&actions)
        return actions
    }

    /// The attempt is over without a ready connection. Waiting callers fail too when no connection is ready.
    private mutating func attemptFailed(_ id: ConnectionID, _ failure: HTTP2ConnectFailure, _ actions: inout [Action]) {
        guard connections[id]?.attempt == .pending else { return }
        connections[id]!.attempt = .failed
        statistics.connectFailures += 1
        actions.append(.connectionFailed(id, failure))
        if let timer = connections[id]!.connectTimeoutTimer {
            connections[id]!.connectTimeoutTimer = nil
            actions.append(.cancelTimer(timer))
        }
        slotAttemptEnded(id, failed: true, &actions)
        if !hasReadyConnection {
            lastConnectFailure = failure.noResponseReason
            failWaiters(failure.noResponseReason, &actions)
        }
    }

    // MARK: - Connection events

    /// A SETTINGS frame; `maxConcurrentStreams` is `nil` when it did not carry that setting. The first one
    /// makes the connection ready: its connect timeout stops and its PINGs start.
    mutating func settingsReceived(_ id: ConnectionID, maxConcurrentStreams: Int?) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        let action = connections[id]!.machine.settingsReceived(maxConcurrentStreams: maxConcurrentStreams)
        if connections[id]!.machine.isReady, connections[id]!.attempt == .pending {
            connections[id]!.attempt = .ready
            actions.append(.connectionReady(id))
            lastConnectFailure = nil
            if let timer = connections[id]!.connectTimeoutTimer {
                connections[id]!.connectTimeoutTimer = nil
                actions.append(.cancelTimer(timer))
            }
            connections[id]!.pingIntervalTimer = schedule(.pingInterval(id), after: timing.pingInterval, &actions)
        }
        afterConnectionEvent(id, action, &actions)
        return actions
    }

    /// A GOAWAY: the connection drains; streams above `lastStreamID` end unprocessed.
    mutating func goAwayReceived(_ id: ConnectionID, lastStreamID: Int, errorCode: UInt32, debugReason: String?) -> [Action] {
        guard connections[id] != nil else { return [] }
        statistics.goAwaysReceived += 1
        var actions: [Action] = []
        let action = connections[id]!.machine.goAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugReason: debugReason)
        afterConnectionEvent(id, action, &actions)
        return actions
    }

    /// The debug reason of the first GOAWAY on the connection that carried one.
    func goAwayDebugReason(_ id: ConnectionID) -> String? {
        connections[id]?.machine.goAwayDebugReason
    }

    mutating func pingAckReceived(_ id: ConnectionID, payload: UInt64) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        connections[id]!.machine.pingAckReceived(payload)
        if let timer = connections[id]!.pingTimeoutTimer, timer.payload == payload {
            connections[id]!.pingTimeoutTimer = nil
            actions.append(.cancelTimer(timer.id))
        }
        afterConnectionEvent(id, .none, &actions)
        return actions
    }

    /// The channel closed; `failure` says why when it never became ready.
    mutating func channelClosed(_ id: ConnectionID, failure: HTTP2ConnectFailure) -> [Action] {
        guard connections[id] != nil else { return [] }
        var actions: [Action] = []
        let action = connections[id]!.machine.channelClosed()
        attemptFailed(id, failure, &actions)
        // A closed channel pings no more; its streams still report.
        for timer in [connections[id]!.pingIntervalTimer, connections[id]!.pingTimeoutTimer?.id, connections[id]!.connectTimeoutTimer] {
            if let timer { actions.append(.cancelTimer(timer)) }
        }
        connections[id]!.pingIntervalTimer = nil
        connections[id]!.pingTimeoutTimer = nil
        connections[id]!.connectTimeoutTimer = nil
        afterConnectionEvent(id, action, &actions)
        checkShutdownComplete(&actions)
        return actions
    }

    private mutating func afterConnectionEvent(_ id: ConnectionID, _ action: HTTP2ConnectionStateMachine.Action, _ actions: inout [Action]) {
        apply(action, to: id, &actions)
        removeIfFinished(id, &actions)
        grantWaiters(&actions)
    }

    // MARK: - Timers

    /// A timer the pool ran for ``Action/scheduleTimer(_:)`` is due. A timer cancelled meanwhile is ignored.
    mutating func timerFired(_ timer: Timer) -> [Action] {
        var actions: [Action] = []
        switch timer.kind {
        case .connectTimeout(let id):
            guard connections[id]?.connectTimeoutTimer == timer.id else { return [] }
            connections[id]!.connectTimeoutTimer = nil
            attemptFailed(id, Self.connectTimeoutFailure, &actions)
            closeChannel(id, &actions)
        case .stableLifetime(let id):
            guard connections[id]?.stableTimer == timer.id else { return [] }
            connections[id]!.stableTimer = nil
            connections[id]!.isStable = true
        case .pingInterval(let id):
            guard connections[id]?.pingIntervalTimer == timer.id else { return [] }
            connections[id]!.pingIntervalTimer = schedule(.pingInterval(id), after: timing.pingInterval, &actions)
            apply(connections[id]!.machine.pingDue(), to: id, &actions)
        case .pingTimeout(let id, let payload):
            guard let armed = connections[id]?.pingTimeoutTimer, armed.id == timer.id else { return [] }
            connections[id]!.pingTimeoutTimer = nil
            apply(connections[id]!.machine.pingTimeoutFired(payload), to: id, &actions)
            grantWaiters(&actions)
        case .backoff(let slot):
            guard slots.indices.contains(slot), case .backingOff(timer.id) = slots[slot].state else { return [] }
            openConnection(forSlot: slot, &actions)
        case .drain:
            guard drainTimer == timer.id else { return [] }
            drainTimer = nil
            closeEverything(&actions)
        }
        return actions
    }

    private mutating func schedule(_ kind: Timer.Kind, after duration: Duration, _ actions: inout [Action]) -> TimerID {
        let id = makeID()
        actions.append(.scheduleTimer(Timer(id: id, kind: kind, duration: duration)))
        return id
    }

    private mutating func cancelTimers(of id: ConnectionID, _ actions: inout [Action]) {
        guard let connection = connections[id] else { return }
        for timer in connection.timers { actions.append(.cancelTimer(timer)) }
        connections[id]!.connectTimeoutTimer = nil
        connections[id]!.stableTimer = nil
        connections[id]!.pingIntervalTimer = nil
        connections[id]!.pingTimeoutTimer = nil
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

    /// Stops new work: fails waiting callers, stops the slots, retires every connection (each closes when its
    /// last stream ends) and starts the drain deadline. With `force` (the run was cancelled) every connection
    /// is closed now instead.
    mutating func shutdown(force: Bool = false) -> [Action] {
        var actions: [Action] = []
        if !isShuttingDown {
            isShuttingDown = true
            failWaiters(Self.shutDownReason, &actions)
            for slot in slots.indices {
                if case .backingOff(let timer) = slots[slot].state { actions.append(.cancelTimer(timer)) }
                slots[slot].state = .stopped
            }
            for id in connections.keys.sorted() {
                apply(connections[id]!.machine.retire(.poolShutdown), to: id, &actions)
            }
            if !force { drainTimer = schedule(.drain, after: timing.drainTimeout, &actions) }
        }
        if force, !drainExpired {
            if let drainTimer { actions.append(.cancelTimer(drainTimer)) }
            drainTimer = nil
            closeEverything(&actions)
        }
        checkShutdownComplete(&actions)
        return actions
    }

    /// The drain is over: close every connection; their streams end without an answer.
    private mutating func closeEverything(_ actions: inout [Action]) {
        drainExpired = true
        for id in connections.keys.sorted() where !connections[id]!.machine.isClosed {
            closeChannel(id, &actions)
        }
        checkShutdownComplete(&actions)
    }

    /// Shutdown is complete once no connection is left, or, after the drain deadline, once every channel is
    /// closed (streams that have not reported yet still will). Attempts still connecting are waited for: they
    /// close as soon as they are attached.
    private mutating func checkShutdownComplete(_ actions: inout [Action]) {
        guard isShuttingDown, !isShutDown else { return }
        for connection in connections.values {
            guard drainExpired, connection.attached, connection.machine.isClosed else { return }
        }
        isShutDown = true
        if let drainTimer { actions.append(.cancelTimer(drainTimer)) }
        drainTimer = nil
        for id in connections.keys.sorted() { cancelTimers(of: id, &actions) }
        actions.append(.shutdownComplete)
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
            guard connections[id]?.attached == true else { break }
            actions.append(.sendPing(id, payload: payload))
            if let stale = connections[id]!.pingTimeoutTimer { actions.append(.cancelTimer(stale.id)) }
            let timer = schedule(.pingTimeout(id, payload: payload), after: timing.pingTimeout, &actions)
            connections[id]!.pingTimeoutTimer = (timer, payload)
        }
    }

    /// The connection takes no new streams. Once it has been ready, its slot moves on to a replacement; an
    /// attempt that never got ready ends when it fails.
    private mutating func signalRetired(_ id: ConnectionID, _ actions: inout [Action]) {
        guard connections[id]?.retiredSignalled == false else { return }
        connections[id]!.retiredSignalled = true
        if connections[id]!.attempt == .ready { slotAttemptEnded(id, failed: false, &actions) }
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
        attemptFailed(id, HTTP2ConnectFailure(detail: "connection closed before HTTP/2 was ready"), &actions)
        signalRetired(id, &actions)
        cancelTimers(of: id, &actions)
        actions.append(.forgetConnection(id))
        connections[id] = nil
        checkShutdownComplete(&actions)
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
                if connection.attempt == .ready { open += 1 }
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
