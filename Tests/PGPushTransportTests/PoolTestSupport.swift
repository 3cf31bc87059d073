import NIOHPACK
import PGPushCore
import Synchronization

@testable import PGPushTransport

/// A clock that moves only when a test advances it, as PostgresNIO's `MockClock`. Tests wait for the sleeps
/// they expect with ``waitForDeadlines(_:)`` before they advance it, so no timer is missed and nothing sleeps.
final class TestClock: Clock {
    struct Instant: InstantProtocol {
        /// Time since the clock's start.
        var offset: Duration

        func advanced(by duration: Duration) -> Self { Instant(offset: offset + duration) }
        func duration(to other: Self) -> Duration { other.offset - offset }
        static func < (lhs: Self, rhs: Self) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct Watcher {
        var predicate: @Sendable ([Duration]) -> Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var nextID = 0
        var sleepers: [Int: Sleeper] = [:]
        var watchers: [Watcher] = []

        var deadlines: [Duration] { sleepers.values.map(\.deadline.offset).sorted() }

        /// The watchers whose condition now holds, removed.
        mutating func satisfiedWatchers() -> [CheckedContinuation<Void, Never>] {
            let deadlines = deadlines
            var satisfied: [CheckedContinuation<Void, Never>] = []
            watchers.removeAll { watcher in
                guard watcher.predicate(deadlines) else { return false }
                satisfied.append(watcher.continuation)
                return true
            }
            return satisfied
        }
    }

    private let state = Mutex(State())

    var now: Instant { state.withLock { $0.now } }
    var minimumResolution: Duration { .nanoseconds(1) }

    /// The deadlines of the sleeps in progress, as offsets from the clock's start, earliest first.
    var deadlines: [Duration] { state.withLock { $0.deadlines } }

    func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Outcome { case sleeping([CheckedContinuation<Void, Never>]), due, cancelled }
                let outcome = state.withLock { state -> Outcome in
                    if Task.isCancelled { return .cancelled }
                    if deadline <= state.now { return .due }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return .sleeping(state.satisfiedWatchers())
                }
                switch outcome {
                case .sleeping(let watchers): for watcher in watchers { watcher.resume() }
                case .due: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let (sleeper, watchers) = state.withLock { state in
                let sleeper = state.sleepers.removeValue(forKey: id)
                return (sleeper, state.satisfiedWatchers())
            }
            sleeper?.continuation.resume(throwing: CancellationError())
            for watcher in watchers { watcher.resume() }
        }
    }

    /// Moves time forward and wakes the sleeps that are due.
    func advance(by duration: Duration) {
        let (due, watchers) = state.withLock { state in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.value.deadline <= now }
            for id in due.keys { state.sleepers[id] = nil }
            return (due.values.map(\.continuation), state.satisfiedWatchers())
        }
        for sleeper in due { sleeper.resume() }
        for watcher in watchers { watcher.resume() }
    }

    /// Waits until the sleeps in progress end exactly at `deadlines` (offsets from the clock's start).
    func waitForDeadlines(_ deadlines: [Duration]) async {
        let expected = deadlines.sorted()
        await waitUntil { $0 == expected }
    }

    /// Waits until `predicate` holds for the deadlines of the sleeps in progress.
    func waitUntil(_ predicate: @escaping @Sendable ([Duration]) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let holds = state.withLock { state in
                if predicate(state.deadlines) { return true }
                state.watchers.append(Watcher(predicate: predicate, continuation: continuation))
                return false
            }
            if holds { continuation.resume() }
        }
    }
}

/// A connection that moves no bytes: the test plays the server through it (SETTINGS, answers, the close).
final class FakeConnection: HTTP2PoolConnection {
    let id: Int
    private let onEvent: @Sendable (HTTP2ConnectionEvent) -> Void
    private let answersPings: Bool
    private let state = Mutex(State())

    private struct State {
        var streams: [HTTP2PendingStream] = []
        var streamsStarted = 0
        var pings: [UInt64] = []
        var isClosed = false
        var watchers: [(condition: @Sendable (Snapshot) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []

        var snapshot: Snapshot { Snapshot(open: streams.count, started: streamsStarted, pings: pings, isClosed: isClosed) }

        mutating func satisfiedWatchers() -> [CheckedContinuation<Void, Never>] {
            let snapshot = snapshot
            var satisfied: [CheckedContinuation<Void, Never>] = []
            watchers.removeAll { watcher in
                guard watcher.condition(snapshot) else { return false }
                satisfied.append(watcher.continuation)
                return true
            }
            return satisfied
        }
    }

    struct Snapshot: Sendable {
        var open: Int
        var started: Int
        var pings: [UInt64]
        var isClosed: Bool
    }

    init(id: Int, answersPings: Bool, onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void) {
        self.id = id
        self.answersPings = answersPings
        self.onEvent = onEvent
    }

    var snapshot: Snapshot { state.withLock { $0.snapshot } }

    // MARK: HTTP2PoolConnection

    func startStreams(_ streams: [HTTP2PendingStream]) {
        let refused = mutate { state in
            guard !state.isClosed else { return true }
            state.streams.append(contentsOf: streams)
            state.streamsStarted += streams.count
            return false
        }
        if refused {
            for stream in streams { stream.onResult(.closed(streamID: nil, resetCode: nil, sawHeadersWithoutStatus: false)) }
        }
    }

    func sendPing(_ payload: UInt64) {
        mutate { $0.pings.append(payload) }
        if answersPings { onEvent(.pingAck(payload)) }
    }

    /// As a channel does: open streams end without an answer, then the close is reported.
    func close() {
        let open = mutate { state -> [HTTP2PendingStream]? in
            guard !state.isClosed else { return nil }
            state.isClosed = true
            defer { state.streams.removeAll() }
            return state.streams
        }
        guard let open else { return }
        for (index, stream) in open.enumerated() {
            stream.onResult(.closed(streamID: 2 * index + 1, resetCode: nil, sawHeadersWithoutStatus: false))
        }
        onEvent(.closed(error: nil, tlsRefusal: nil))
    }

    // MARK: The server's side

    func sendSettings(maxConcurrentStreams: Int?) {
        onEvent(.settings(maxConcurrentStreams: maxConcurrentStreams))
    }

    /// Answers the oldest open stream.
    func answerOldest(status: Int) {
        let stream = mutate { state in state.streams.isEmpty ? nil : state.streams.removeFirst() }
        stream?.onResult(.response(ProviderResponse(status: status)))
    }

    // MARK: Waiting

    func waitUntil(_ condition: @escaping @Sendable (Snapshot) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let holds = state.withLock { state in
                if condition(state.snapshot) { return true }
                state.watchers.append((condition, continuation))
                return false
            }
            if holds { continuation.resume() }
        }
    }

    func waitUntilClosed() async { await waitUntil(\.isClosed) }

    @discardableResult
    private func mutate<T>(_ body: (inout State) -> T) -> T {
        let (result, watchers) = state.withLock { state in
            let result = body(&state)
            return (result, state.satisfiedWatchers())
        }
        for watcher in watchers { watcher.resume() }
        return result
    }
}

/// Hands the pool ``FakeConnection``s, or fails, as its script says; records every attempt.
final class FakeConnectionFactory: HTTP2ConnectionFactory {
    enum Behaviour: Sendable {
        /// The connection comes up and the server's SETTINGS arrive with this limit.
        case ready(maxConcurrentStreams: Int?)
        /// TCP comes up; the server says nothing.
        case silent
        case fail(HTTP2ConnectFailure)
    }

    private struct State {
        var script: [Behaviour]
        var attempts: [FakeConnection?] = []
        var watchers: [(count: Int, continuation: CheckedContinuation<[FakeConnection?], Never>)] = []
    }

    private let state: Mutex<State>
    private let otherwise: Behaviour
    private let answersPings: Bool

    /// - Parameters:
    ///   - script: What the first attempts do, in order.
    ///   - otherwise: What every attempt after the script does.
    init(_ script: [Behaviour] = [], otherwise: Behaviour = .ready(maxConcurrentStreams: 10), answersPings: Bool = false) {
        state = Mutex(State(script: script))
        self.otherwise = otherwise
        self.answersPings = answersPings
    }

    func makeConnection(
        id: Int, onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) async throws -> any HTTP2PoolConnection {
        let behaviour = state.withLock { $0.script.isEmpty ? otherwise : $0.script.removeFirst() }
        var connection: FakeConnection?
        if case .fail = behaviour {} else {
            connection = FakeConnection(id: id, answersPings: answersPings, onEvent: onEvent)
        }
        let watchers = state.withLock { state in
            state.attempts.append(connection)
            let attempts = state.attempts
            var due: [(CheckedContinuation<[FakeConnection?], Never>, [FakeConnection?])] = []
            state.watchers.removeAll { watcher in
                guard attempts.count >= watcher.count else { return false }
                due.append((watcher.continuation, attempts))
                return true
            }
            return due
        }
        for (continuation, attempts) in watchers { continuation.resume(returning: attempts) }
        switch behaviour {
        case .fail(let failure):
            throw failure
        case .silent:
            return connection!
        case .ready(let limit):
            // Before the pool attaches it: the pool hands the slots out on attach.
            connection!.sendSettings(maxConcurrentStreams: limit)
            return connection!
        }
    }

    var attemptCount: Int { state.withLock { $0.attempts.count } }

    /// Waits for the `number`th attempt (from 1) and returns its connection; `nil` for a failed attempt.
    func attempt(_ number: Int) async -> FakeConnection? {
        let attempts = await withCheckedContinuation { (continuation: CheckedContinuation<[FakeConnection?], Never>) in
            let attempts = state.withLock { state -> [FakeConnection?]? in
                if state.attempts.count >= number { return state.attempts }
                state.watchers.append((number, continuation))
                return nil
            }
            if let attempts { continuation.resume(returning: attempts) }
        }
        return attempts[number - 1]
    }
}

/// A request with no headers or body worth the name: the fake connection only counts it.
struct FakeRequest: PushRequest {
    func headers(authority: String, authorization: String?) -> HPACKHeaders { [":method": "POST", ":path": "/"] }
    var body: [UInt8] { [] }
    static var keepsResponseBody: Bool { false }
}

/// The timers a pool has handled, for tests that must know a timer's effect has landed before they go on
/// (a timer such as the stable lifetime changes nothing a test can see until later).
final class HandledTimers: Sendable {
    private struct State {
        var handled: [HTTP2PoolStateMachine.Timer.Kind] = []
        var watchers: [(kind: HTTP2PoolStateMachine.Timer.Kind, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())

    func record(_ timer: HTTP2PoolStateMachine.Timer) {
        let due = state.withLock { state in
            state.handled.append(timer.kind)
            var due: [CheckedContinuation<Void, Never>] = []
            state.watchers.removeAll { watcher in
                guard watcher.kind == timer.kind else { return false }
                due.append(watcher.continuation)
                return true
            }
            return due
        }
        for continuation in due { continuation.resume() }
    }

    /// Waits until a timer of `kind` has been handled.
    func wait(for kind: HTTP2PoolStateMachine.Timer.Kind) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let handled = state.withLock { state in
                if state.handled.contains(kind) { return true }
                state.watchers.append((kind, continuation))
                return false
            }
            if handled { continuation.resume() }
        }
    }
}
