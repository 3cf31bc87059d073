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
    private let statementCounter = Atomic<Int>(0)

    public init(client: PostgresClient, workerID: String, logger: Logger) {
        self.client = client
        self.workerID = workerID
        self.leaseOwner = "\(workerID)#\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        self.logger = logger
    }

    /// Statements sent to PostgreSQL so far (the benchmark reports them per 1,000 tokens).
    public var statementsExecuted: Int { statementCounter.load(ordering: .relaxed) }

    func counted(_ statements: Int = 1) {
        statementCounter.add(statements, ordering: .relaxed)
    }

    /// The longest any one statement or transaction of the worker may take before it is abandoned as hung.
    /// PostgreSQL's own `statement_timeout` (20 s on worker connections, ``DatabaseURL/ServerTimeouts/worker``)
    /// ends the statement on the server; this catches the client side of a dying connection that never
    /// answers, which was seen right after a server restart. Well inside the 30-second lease.
    public static let deadline: Duration = .seconds(25)

    /// The NOTIFY channel of `push.cancel`; the payload is the job id.
    public static let cancelChannel = "pgpush_cancel"

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

    func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        counted(2)  // BEGIN and COMMIT
        let client = self.client
        let logger = self.logger
        do {
            return try await withDeadline(Self.deadline) {
                try await client.withTransaction(logger: logger) { connection in
                    try await body(connection)
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

/// Runs `operation`, or throws ``PGPushError/Code/databaseUnavailable`` once `deadline` passes; the operation is
/// then cancelled and left to wind down on its own, so a hung client call cannot hang the caller.
///
/// The deadline is an event-loop timer that a finished call removes. A cancelled `Task.sleep` would stay
/// scheduled until its time came: with a 60-second deadline on every statement, the worker held a minute's
/// worth of dead timers and their tasks.
func withDeadline<T: Sendable>(
    _ deadline: Duration,
    on eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any(),
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let race = DeadlineRace()
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let (seconds, attoseconds) = deadline.components
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        let timer = eventLoop.scheduleTask(in: .nanoseconds(nanoseconds)) {
            guard let work = race.finish() else { return }
            work?.cancel()
            continuation.resume(throwing: PGPushError(.databaseUnavailable, "a database call did not finish within \(deadline)"))
        }
        let work = Task {
            let result: Result<T, any Error>
            do { result = .success(try await operation()) } catch { result = .failure(error) }
            timer.cancel()
            if race.finish() != nil { continuation.resume(with: result) }
        }
        // The timer may have fired before the task existed; then it could not cancel it.
        if race.attach(work) { work.cancel() }
    }
}

/// Who ends a ``withDeadline(_:on:_:)`` call first: the operation or the timer.
private final class DeadlineRace: Sendable {
    private let state = Mutex<(finished: Bool, work: Task<Void, Never>?)>((false, nil))

    /// For the first caller only: the operation's task, if attached yet. Nil for everyone after.
    func finish() -> Task<Void, Never>?? {
        state.withLock { state in
            defer { state.finished = true }
            return state.finished ? nil : .some(state.work)
        }
    }

    /// Records the operation's task; true if the race is already over (so the task should be cancelled).
    func attach(_ work: Task<Void, Never>) -> Bool {
        state.withLock { state in
            state.work = work
            return state.finished
        }
    }
}
