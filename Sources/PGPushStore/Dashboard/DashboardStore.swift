import Foundation
import Logging
import PGPushCore
import PostgresNIO

/// Every SQL statement of `pgpush dashboard`, on the dashboard's own pool. Grouped by page in the
/// `DashboardStore+*.swift` files of this folder; the actions reuse ``OperatorStore``'s statements.
///
/// Each page reads in one short transaction (``read(_:)``) that first sets a local `statement_timeout` and makes
/// the transaction read-only: a page that would run long is cut off by the server instead of holding a
/// connection, and no page can write. `SET LOCAL`, not a startup parameter, so the pool also works through
/// PgBouncer in transaction pooling (see ``DatabaseURL/clientConfiguration(maximumConnections:)``).
///
/// Tenancy: the views filter by `push.granted_apps()` themselves; every table read directly is filtered by the
/// same list, read once per transaction (``DashboardReader/granted``), so a login granted some apps sees only
/// those everywhere, totals included.
public struct DashboardStore: Sendable {
    public let client: PostgresClient
    public let statementTimeout: Duration
    let logger: Logger

    public init(client: PostgresClient, statementTimeout: Duration = .seconds(5), logger: Logger) {
        self.client = client
        self.statementTimeout = statementTimeout
        self.logger = logger
    }

    /// The longest a page's transaction may take, the wait for a connection included: a page runs up to five
    /// statements, each within ``statementTimeout``, so this cuts off only a call that hangs.
    public var pageDeadline: Duration { statementTimeout * 6 + .seconds(5) }

    /// Runs `body` in a read-only transaction with the statement timeout set and the login's granted apps read.
    public func read<Result: Sendable>(_ body: @escaping @Sendable (DashboardReader) async throws -> Result) async throws -> Result {
        let milliseconds = String(statementTimeout.components.seconds * 1000
            + statementTimeout.components.attoseconds / 1_000_000_000_000_000)
        let logger = self.logger
        return try await transaction { connection in
            let rows = try await connection.query("""
                SELECT set_config('statement_timeout', \(milliseconds), true),
                       set_config('transaction_read_only', 'on', true),
                       push.granted_apps()
                """, logger: logger).collect()
            let granted = try rows.first?.decode((String, String, [String]?).self).2
            return try await body(DashboardReader(connection: connection, granted: granted, logger: logger))
        }
    }

    /// Runs `body` in a read-write transaction with the statement timeout set (the actions).
    func write<Result: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> Result) async throws -> Result {
        let milliseconds = String(statementTimeout.components.seconds * 1000
            + statementTimeout.components.attoseconds / 1_000_000_000_000_000)
        let logger = self.logger
        return try await transaction { connection in
            _ = try await connection.query("SELECT set_config('statement_timeout', \(milliseconds), true)", logger: logger).collect()
            return try await body(connection)
        }
    }

    /// A transaction on a connection of the pool, given up (``PGPushError/Code/databaseUnavailable``) once its
    /// connection closes under it, or at ``pageDeadline``: a page must not hang on a server that restarted.
    func transaction<Result: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        try await client.withWatchedTransaction(deadline: pageDeadline, logger: logger, body)
    }
}

/// One page's read transaction: its connection and the apps the login may see.
public struct DashboardReader: Sendable {
    let connection: PostgresConnection
    /// `push.granted_apps()`: `nil` when the login is not restricted. Bound into every statement that reads a
    /// table directly as `(granted IS NULL OR app_id = ANY (granted))`.
    public let granted: [String]?
    let logger: Logger

    func run(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await connection.query(query, logger: logger).collect()
    }

    /// The one row of an aggregate.
    func single(_ query: PostgresQuery) async throws -> PostgresRow {
        guard let row = try await run(query).first else {
            throw PGPushError(.internal, "an aggregate returned no row")
        }
        return row
    }
}
