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

    @discardableResult
    func run(_ query: PostgresQuery) async throws -> [PostgresRow] {
        counted()
        return try await client.query(query, logger: logger).collect()
    }

    @discardableResult
    func run(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> [PostgresRow] {
        counted()
        return try await connection.query(query, logger: logger).collect()
    }

    func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> sending T) async throws -> T {
        counted(2)  // BEGIN and COMMIT
        do {
            return try await client.withTransaction(logger: logger) { connection in
                try await body(connection)
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
