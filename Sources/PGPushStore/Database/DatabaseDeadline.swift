import Logging
import NIOCore
import NIOPosix
import PGPushCore
import PostgresNIO
import Synchronization

/// Runs `operation`, or throws ``PGPushError/Code/databaseUnavailable`` once `deadline` passes or once the
/// connection the operation reported through its ``DatabaseCallWatch`` has closed, or `CancellationError` once
/// the caller is cancelled. The operation is then cancelled and left to wind down on its own, so neither a hung
/// client call nor a shutdown waits for it.
///
/// The closed connection matters because PostgresNIO hands a query to a connection's channel without a write
/// promise: a connection the server closed an instant before (a fast shutdown's 57P01) drops the query, and its
/// caller waits forever. A restart caught about one call in ten that way; the deadline alone held each for 25 s.
///
/// The timer is an event-loop timer that a finished call removes. A cancelled `Task.sleep` would stay
/// scheduled until its time came: with a 25-second deadline on every statement, the worker held that many
/// seconds of dead timers and their tasks. It first fires after `checkEvery`, and then every `checkEvery`,
/// to look at the watched connection; a call that finishes sooner, as nearly all do, never sees it fire.
func withDeadline<T: Sendable>(
    _ deadline: Duration,
    checkEvery: Duration = .seconds(1),
    on eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any(),
    _ operation: @escaping @Sendable (DatabaseCallWatch) async throws -> T
) async throws -> T {
    let race = DeadlineRace<T>(
        eventLoop: eventLoop, deadline: .now() + TimeAmount(deadline), checkEvery: TimeAmount(checkEvery), limit: deadline)
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.install(continuation)
            race.armTimer()
            let watch = DatabaseCallWatch(race)
            // Unstructured on purpose: a client call that ignores cancellation (a connection attempt to an
            // unreachable server, a query its closed connection dropped) must not hold its caller past the
            // deadline, which a child task would.
            let work = Task {
                let result: Result<T, any Error>
                do { result = .success(try await operation(watch)) } catch { result = .failure(error) }
                race.finish(result)
            }
            race.attach(work: work)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

extension PostgresClient {
    /// Runs `body` on a connection of the pool under `deadline`; a connection that closes under it ends the call
    /// at once (see ``withDeadline(_:checkEvery:on:_:)``).
    func withWatchedConnection<T: Sendable>(
        deadline: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await withDeadline(deadline) { watch in
            try await self.withConnection { connection in
                watch.watch(connection)
                defer { watch.unwatch() }
                return try await body(connection)
            }
        }
    }

    /// ``withWatchedConnection(deadline:_:)`` in a transaction. An error of `body` is thrown as it is, not
    /// wrapped in PostgresNIO's `PostgresTransactionError`.
    func withWatchedTransaction<T: Sendable>(
        deadline: Duration, logger: Logger, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        do {
            return try await withWatchedConnection(deadline: deadline) { connection in
                try await connection.withTransaction(logger: logger) { try await body($0) }
            }
        } catch let error as PostgresTransactionError {
            if let closureError = error.closureError { throw closureError }
            throw error
        }
    }
}

/// What a call under ``withDeadline(_:checkEvery:on:_:)`` tells its deadline
/// about: the connection it leased, so that the call ends when that connection closes.
struct DatabaseCallWatch: Sendable {
    private let report: @Sendable (PostgresConnection) -> Void
    private let forget: @Sendable () -> Void

    fileprivate init<T>(_ race: DeadlineRace<T>) {
        self.report = { race.watch($0) }
        self.forget = { race.unwatch() }
    }

    /// From now until ``unwatch()``, the call ends once `connection` has closed; at once if it already has.
    func watch(_ connection: PostgresConnection) {
        report(connection)
    }

    /// The call is done with its connection (its lease is about to be released): a close from now on is not
    /// this call's.
    func unwatch() {
        forget()
    }
}

extension TimeAmount {
    fileprivate init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}

/// Who ends a ``withDeadline(_:checkEvery:on:_:)`` call first: the operation,
/// the timer (deadline passed, or the watched connection closed) or the caller's cancellation. Whoever comes
/// first resumes the caller; the operation is cancelled and the timer removed.
private final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var work: Task<Void, Never>?
        var timer: Scheduled<Void>?
        var connection: PostgresConnection?
        /// The result, when the race ended before the continuation was installed (an already cancelled caller).
        var early: Result<T, any Error>?
        var finished = false
    }

    private let state = Mutex(State())
    private let eventLoop: any EventLoop
    private let deadline: NIODeadline
    private let checkEvery: TimeAmount
    private let limit: Duration

    init(eventLoop: any EventLoop, deadline: NIODeadline, checkEvery: TimeAmount, limit: Duration) {
        self.eventLoop = eventLoop
        self.deadline = deadline
        self.checkEvery = checkEvery
        self.limit = limit
    }

    func install(_ continuation: CheckedContinuation<T, any Error>) {
        let early = state.withLock { state -> Result<T, any Error>? in
            if state.finished { return state.early }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    /// Records the operation's task; it is cancelled at once if the race is already over.
    func attach(work: Task<Void, Never>) {
        let finished = state.withLock { state in
            if !state.finished { state.work = work }
            return state.finished
        }
        if finished { work.cancel() }
    }

    func watch(_ connection: PostgresConnection) {
        state.withLock { if !$0.finished { $0.connection = connection } }
        // The pool may hand out a connection that closed a moment ago, before it heard of the close.
        if connection.isClosed { finishClosed() }
    }

    func unwatch() {
        state.withLock { $0.connection = nil }
    }

    /// Schedules the next look: at the next check or at the deadline, whichever is first.
    func armTimer() {
        let fireAt = min(deadline, .now() + checkEvery)
        let timer = eventLoop.scheduleTask(deadline: fireAt) { self.timerFired() }
        let finished = state.withLock { state in
            if !state.finished { state.timer = timer }
            return state.finished
        }
        if finished { timer.cancel() }
    }

    private func timerFired() {
        if NIODeadline.now() >= deadline {
            finish(.failure(PGPushError(.databaseUnavailable, "a database call did not finish within \(limit)")))
        } else if state.withLock({ $0.connection?.isClosed }) == true {
            finishClosed()
        } else {
            armTimer()
        }
    }

    private func finishClosed() {
        finish(.failure(PGPushError(.databaseUnavailable, "the database connection closed during a call")))
    }

    /// Ends the race with `result` if nobody else has.
    func finish(_ result: Result<T, any Error>) {
        let ended = state.withLock { state -> (CheckedContinuation<T, any Error>?, Task<Void, Never>?, Scheduled<Void>?)? in
            guard !state.finished else { return nil }
            state.finished = true
            if state.continuation == nil { state.early = result }
            // Nothing of the call stays referenced here: an operation hung on a dropped query never ends, and
            // its task holds this race.
            defer {
                state.continuation = nil
                state.connection = nil
                state.work = nil
                state.timer = nil
            }
            return (state.continuation, state.work, state.timer)
        }
        guard let (continuation, work, timer) = ended else { return }
        timer?.cancel()
        work?.cancel()  // harmless when the work is what finished
        continuation?.resume(with: result)
    }
}
