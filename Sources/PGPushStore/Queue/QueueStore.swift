import Foundation
import Logging
import NIOCore
import NIOPosix
import PGPushCore
import PostgresNIO
import Synchronization

/// Every SQL statement a worker runs: expansion, claim, leases, completion, fleet registry, provider tokens,
/// pruning and maintenance. Grouped by concern in the `QueueStore+*.swift` files of this folder.
public final class QueueStore: Sendable {
    public let client: PostgresClient
    public let workerID: String
    /// Who holds this process's leases: the worker id plus a per-process suffix. Leases belong to a process,
    /// not a name, so a worker restarted under the same `--worker-id` neither renews nor inherits the chunks of
    /// the process before it; they are rescued once their lease runs out, like any dead worker's.
    public let leaseOwner: String
    let logger: Logger
    /// Set with `SET LOCAL` at the start of every transaction; nil leaves the server's defaults.
    let serverTimeouts: DatabaseURL.ServerTimeouts?
    private let statementCounter = Atomic<Int>(0)

    public init(client: PostgresClient, workerID: String, serverTimeouts: DatabaseURL.ServerTimeouts? = .worker, logger: Logger) {
        self.client = client
        self.workerID = workerID
        self.serverTimeouts = serverTimeouts
        self.leaseOwner = "\(workerID)#\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        self.logger = logger
    }

    /// Statements sent to PostgreSQL so far (the benchmark reports them per 1,000 tokens).
    public var statementsExecuted: Int { statementCounter.load(ordering: .relaxed) }

    func counted(_ statements: Int = 1) {
        statementCounter.add(statements, ordering: .relaxed)
    }

    /// The longest any one statement or transaction of the worker may take before it is abandoned as hung.
    /// PostgreSQL's own `statement_timeout` (20 s in worker transactions, ``DatabaseURL/ServerTimeouts/worker``)
    /// ends the statement on the server; this catches the client side of a dying connection that never
    /// answers, which was seen right after a server restart. Well inside the 30-second lease.
    public static let deadline: Duration = .seconds(25)

    /// The NOTIFY channel of `push.cancel`; the payload is the job id.
    public static let cancelChannel = "pgpush_cancel"

    /// The NOTIFY channel of new jobs (`push.jobs`' statement trigger); a hint only.
    public static let jobsChannel = "pgpush_jobs"

    @discardableResult
    func run(_ query: PostgresQuery, deadline: Duration = QueueStore.deadline) async throws -> [PostgresRow] {
        counted()
        let client = self.client
        let logger = self.logger
        return try await withDeadline(deadline) {
            try await client.query(query, logger: logger).collect()
        }
    }

    @discardableResult
    func run(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> [PostgresRow] {
        counted()
        return try await connection.query(query, logger: logger).collect()
    }

    /// Runs `body` in a transaction whose statements carry the server timeouts and `jit = off`, set with
    /// `SET LOCAL` so that they end with the transaction: through PgBouncer in transaction pooling, the server
    /// connection serves another client next.
    func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        counted(serverTimeouts == nil ? 2 : 3)  // BEGIN, the settings, COMMIT
        let client = self.client
        let logger = self.logger
        let timeouts = self.serverTimeouts
        do {
            return try await withDeadline(Self.deadline) {
                try await client.withTransaction(logger: logger) { connection in
                    if let timeouts {
                        try await connection.query("""
                            SELECT set_config('statement_timeout', \(timeouts.statementMilliseconds), true),
                                   set_config('lock_timeout', \(timeouts.lockMilliseconds), true),
                                   set_config('jit', 'off', true)
                            """, logger: logger)
                    }
                    return try await body(connection)
                }
            }
        } catch let error as PostgresTransactionError {
            if let closureError = error.closureError { throw closureError }
            throw error
        }
    }
}

/// A completion whose guard failed: the chunk's lease now belongs to another worker, which will record the
/// outcomes instead. Nothing of this completion was written.
public struct LeaseLost: Error, Sendable, CustomStringConvertible {
    public var chunkID: Int64
    public var description: String { "lease on chunk \(chunkID) was lost to another worker" }
}

/// Runs `operation`, or throws ``PGPushError/Code/databaseUnavailable`` once `deadline` passes, or
/// `CancellationError` once the caller is cancelled; the operation is then cancelled and left to wind down on
/// its own, so neither a hung client call nor a shutdown waits for it.
///
/// The deadline is an event-loop timer that a finished call removes. A cancelled `Task.sleep` would stay
/// scheduled until its time came: with a 60-second deadline on every statement, the worker held a minute's
/// worth of dead timers and their tasks.
func withDeadline<T: Sendable>(
    _ deadline: Duration,
    on eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any(),
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let race = DeadlineRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.install(continuation)
            let (seconds, attoseconds) = deadline.components
            let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
            let timer = eventLoop.scheduleTask(in: .nanoseconds(nanoseconds)) {
                race.finish(.failure(PGPushError(.databaseUnavailable, "a database call did not finish within \(deadline)")))
            }
            // Unstructured on purpose: a client call that ignores cancellation (a connection attempt to an
            // unreachable server) must not hold its caller past the deadline, which a child task would.
            let work = Task {
                let result: Result<T, any Error>
                do { result = .success(try await operation()) } catch { result = .failure(error) }
                race.finish(result)
            }
            race.attach(work: work, timer: timer)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// Who ends a ``withDeadline(_:on:_:)`` call first: the operation, the timer or the caller's cancellation.
/// Whoever comes first resumes the caller; the operation is cancelled and the timer removed.
private final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var work: Task<Void, Never>?
        var timer: Scheduled<Void>?
        /// The result, when the race ended before the continuation was installed (an already cancelled caller).
        var early: Result<T, any Error>?
        var finished = false
    }

    private let state = Mutex(State())

    func install(_ continuation: CheckedContinuation<T, any Error>) {
        let early = state.withLock { state -> Result<T, any Error>? in
            if state.finished { return state.early }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    /// Records the operation's task and timer; both are stopped at once if the race is already over.
    func attach(work: Task<Void, Never>, timer: Scheduled<Void>) {
        let finished = state.withLock { state in
            state.work = work
            state.timer = timer
            return state.finished
        }
        if finished {
            work.cancel()
            timer.cancel()
        }
    }

    /// Ends the race with `result` if nobody else has.
    func finish(_ result: Result<T, any Error>) {
        let ended = state.withLock { state -> (CheckedContinuation<T, any Error>?, Task<Void, Never>?, Scheduled<Void>?)? in
            guard !state.finished else { return nil }
            state.finished = true
            if state.continuation == nil { state.early = result }
            defer { state.continuation = nil }
            return (state.continuation, state.work, state.timer)
        }
        guard let (continuation, work, timer) = ended else { return }
        timer?.cancel()
        work?.cancel()  // harmless when the work is what finished
        continuation?.resume(with: result)
    }
}
