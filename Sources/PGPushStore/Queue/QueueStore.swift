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
    /// ends the statement on the server; this catches the client side of a connection that never answers (a
    /// connection attempt to a host that went away). A connection that closes under a call ends it sooner
    /// (``PostgresClient/withWatchedConnection(deadline:_:)``). Well inside the 30-second lease.
    public static let deadline: Duration = .seconds(25)

    /// The NOTIFY channel of `push.cancel`; the payload is the job id.
    public static let cancelChannel = "pgpush_cancel"

    /// The NOTIFY channel of new jobs (`push.jobs`' statement trigger); a hint only.
    public static let jobsChannel = "pgpush_jobs"

    @discardableResult
    func run(_ query: PostgresQuery, deadline: Duration = QueueStore.deadline) async throws -> [PostgresRow] {
        counted()
        let logger = self.logger
        return try await client.withWatchedConnection(deadline: deadline) { connection in
            try await connection.query(query, logger: logger).collect()
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
        let logger = self.logger
        let timeouts = self.serverTimeouts
        return try await client.withWatchedTransaction(deadline: Self.deadline, logger: logger) { connection in
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
}

/// A completion whose guard failed: the chunk's lease now belongs to another worker, which will record the
/// outcomes instead. Nothing of this completion was written.
public struct LeaseLost: Error, Sendable, CustomStringConvertible {
    public var chunkID: Int64
    public var description: String { "lease on chunk \(chunkID) was lost to another worker" }
}
