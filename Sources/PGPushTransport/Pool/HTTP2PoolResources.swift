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

/// Everything the pool guards with its lock: the ``HTTP2PoolStateMachine`` that decides, and the objects its
/// ids stand for (channels, the promises a connection slot waits on, suspended callers).
struct HTTP2PoolResources {
    struct Attempt {
        let ready: EventLoopPromise<Void>
        let retired: EventLoopPromise<Void>
    }

    var machine: HTTP2PoolStateMachine
    var connections: [Int: HTTP2Connection] = [:]
    var attempts: [Int: Attempt] = [:]
    var waiters: [Int: CheckedContinuation<HTTP2SlotGrant, Never>] = [:]

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
            case .connectionReady(let id):
                if let attempt = attempts[id] { effects.readySucceeded.append(attempt.ready) }
            case .connectionFailed(let id, let failure):
                if let attempt = attempts[id] { effects.readyFailed.append((attempt.ready, failure)) }
            case .connectionRetired(let id):
                if let attempt = attempts[id] { effects.retired.append(attempt.retired) }
            case .closeConnection(let id):
                if let connection = connections[id] { effects.close.append(connection) }
            case .sendPing(let id, let payload):
                if let connection = connections[id] { effects.pings.append((connection, payload)) }
            case .forgetConnection(let id):
                connections[id] = nil
                attempts[id] = nil
            }
        }
        return effects
    }
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
