import PGPushCore

/// A reserved stream slot on one connection.
struct HTTP2StreamLease: Sendable {
    let connectionID: Int
    let connection: any HTTP2PoolConnection
}

/// What a waiting caller is resumed with.
enum HTTP2SlotGrant: Sendable {
    case granted(HTTP2StreamLease)
    case failed(ProviderNoResponseReason)
}

/// What ``HTTP2ConnectionPool/run()`` starts in its task group, in the order the state machine asked.
enum HTTP2PoolRunEvent: Sendable {
    case openConnection(HTTP2PoolStateMachine.ConnectionID)
    case runTimer(HTTP2PoolStateMachine.Timer)
}

/// Everything the pool guards with its lock: the ``HTTP2PoolStateMachine`` that decides, and the objects its
/// ids stand for (connections, suspended callers, running timers).
struct HTTP2PoolResources {
    typealias TimerID = HTTP2PoolStateMachine.TimerID

    /// A timer's task, as far as cancelling it goes.
    enum TimerHandle {
        /// Asked for; its task has not started waiting yet.
        case scheduled
        /// Its task waits on this continuation for a cancellation, beside its sleep.
        case armed(CheckedContinuation<Void, Never>)
        /// Cancelled (or over) before its task started waiting: the task ends as soon as it does.
        case released
    }

    var machine: HTTP2PoolStateMachine
    var connections: [Int: any HTTP2PoolConnection] = [:]
    var waiters: [Int: CheckedContinuation<HTTP2SlotGrant, Never>] = [:]
    var timers: [TimerID: TimerHandle] = [:]
    /// Connections the run loop was asked to open and has not started opening.
    var unopened: Set<Int> = []
    /// ``HTTP2ConnectionPool/run()`` waiting for ``HTTP2PoolStateMachine/Action/shutdownComplete``.
    var shutdownWaiter: CheckedContinuation<Void, Never>?

    init(machine: HTTP2PoolStateMachine) {
        self.machine = machine
    }

    /// The objects the actions name, taken while the lock is held; performed after it is released.
    mutating func resolve(_ actions: [HTTP2PoolStateMachine.Action]) -> HTTP2PoolEffects {
        var effects = HTTP2PoolEffects()
        for action in actions {
            switch action {
            case .leaseToWaiter(let waiter, let id):
                guard let continuation = waiters.removeValue(forKey: waiter), let connection = connections[id] else { continue }
                effects.grants.append((continuation, .granted(HTTP2StreamLease(connectionID: id, connection: connection))))
            case .failWaiter(let waiter, let reason):
                guard let continuation = waiters.removeValue(forKey: waiter) else { continue }
                effects.grants.append((continuation, .failed(reason)))
            case .openConnection(let id):
                unopened.insert(id)
                effects.others.append(.run(.openConnection(id)))
            case .connectionReady(let id):
                effects.others.append(.logReady(id))
            case .connectionFailed(let id, let failure):
                effects.others.append(.logFailure(id, failure))
            case .closeConnection(let id):
                if let connection = connections[id] { effects.others.append(.close(connection)) }
            case .sendPing(let id, let payload):
                if let connection = connections[id] { effects.others.append(.ping(connection, payload)) }
            case .forgetConnection(let id):
                connections[id] = nil
            case .scheduleTimer(let timer):
                timers[timer.id] = .scheduled
                effects.others.append(.run(.runTimer(timer)))
            case .cancelTimer(let id):
                if let task = releaseTimer(id) { effects.others.append(.resume(task)) }
            case .shutdownComplete:
                effects.others.append(.finishRun(shutdownWaiter))
                shutdownWaiter = nil
            }
        }
        return effects
    }

    /// A timer's task starts waiting for a cancellation; `false` if it was cancelled already (then it must not wait).
    mutating func armTimer(_ id: TimerID, _ continuation: CheckedContinuation<Void, Never>) -> Bool {
        guard case .scheduled = timers[id] else {
            timers[id] = nil
            return false
        }
        timers[id] = .armed(continuation)
        return true
    }

    /// Cancels the timer, or ends its task after it fired: returns the continuation to resume, if its task waits.
    mutating func releaseTimer(_ id: TimerID) -> CheckedContinuation<Void, Never>? {
        switch timers[id] {
        case .armed(let continuation):
            timers[id] = nil
            return continuation
        case .scheduled:
            timers[id] = .released
            return nil
        case .released, nil:
            return nil
        }
    }
}

/// Side effects collected under the pool lock and performed after it is released, in order.
struct HTTP2PoolEffects {
    enum Effect {
        case close(any HTTP2PoolConnection)
        case ping(any HTTP2PoolConnection, UInt64)
        /// Hand to ``HTTP2ConnectionPool/run()``'s event stream.
        case run(HTTP2PoolRunEvent)
        /// End a cancelled timer's task.
        case resume(CheckedContinuation<Void, Never>)
        case logReady(Int)
        case logFailure(Int, HTTP2ConnectFailure)
        /// End the event stream and resume ``HTTP2ConnectionPool/run()`` if it waits.
        case finishRun(CheckedContinuation<Void, Never>?)
    }

    /// Resumed callers: the only effect on the send path, kept apart from the rest.
    var grants: [(CheckedContinuation<HTTP2SlotGrant, Never>, HTTP2SlotGrant)] = []
    var others: [Effect] = []

    var closesConnection: Bool {
        others.contains { if case .close = $0 { true } else { false } }
    }
}
