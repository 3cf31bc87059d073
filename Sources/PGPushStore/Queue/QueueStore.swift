import Foundation
import Logging
import PGPushCore
import PostgresNIO
import Synchronization

/// Every SQL statement a worker runs: expansion, claim, leases, completion, fleet registry, provider tokens,
/// pruning and maintenance. Grouped by concern in the `QueueStore+*.swift` files of this folder.
public final class QueueStore: Sendable {
    public let client: PostgresClient
    public let workerID: String
    let logger: Logger
    private let statementCounter = Atomic<Int>(0)

    public init(client: PostgresClient, workerID: String, logger: Logger) {
        self.client = client
        self.workerID = workerID
        self.logger = logger
    }

    /// Statements sent to PostgreSQL so far (the benchmark reports them per 1,000 tokens).
    public var statementsExecuted: Int { statementCounter.load(ordering: .relaxed) }

    func counted(_ statements: Int = 1) {
        statementCounter.add(statements, ordering: .relaxed)
    }

    /// The longest any one statement or transaction of the worker may take before it is abandoned as hung.
    /// PostgreSQL's own `statement_timeout` cannot help when the client side of a dying connection never
    /// answers, which was seen right after a server restart.
    public static let deadline: Duration = .seconds(60)

    @discardableResult
    func run(_ query: PostgresQuery) async throws -> [PostgresRow] {
        counted()
        let client = self.client
        let logger = self.logger
        return try await withDeadline(Self.deadline) {
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
func withDeadline<T: Sendable>(_ deadline: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let outcome = Mutex<Bool>(false)
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let claim: @Sendable () -> Bool = {
            outcome.withLock { done in
                defer { done = true }
                return !done
            }
        }
        let work = Task { try await operation() }
        let timer = Task {
            try? await Task.sleep(for: deadline)
            if !Task.isCancelled, claim() {
                work.cancel()
                continuation.resume(throwing: PGPushError(.databaseUnavailable, "a database call did not finish within \(deadline)"))
            }
        }
        Task {
            let result = await work.result
            timer.cancel()
            if claim() { continuation.resume(with: result) }
        }
    }
}
