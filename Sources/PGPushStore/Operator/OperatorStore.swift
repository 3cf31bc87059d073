import Foundation
import Logging
import PostgresNIO

/// Every SQL statement of the operator commands (`pgpush apps`, `devices`, `enqueue`, `watch`, `stats`), run on
/// one short-lived connection that the caller opens and closes. Grouped by concern in the `OperatorStore+*.swift`
/// files of this folder; the worker's statements are in ``QueueStore``.
public struct OperatorStore: Sendable {
    public let connection: PostgresConnection
    let logger: Logger

    public init(connection: PostgresConnection, logger: Logger) {
        self.connection = connection
        self.logger = logger
    }

    /// Runs one statement and collects its rows: a server error surfaces here, and the connection reads the
    /// whole result before the next statement. Package-wide, for the development tools' own statements; no
    /// client of the library sends SQL of its own.
    @discardableResult
    package func run(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await connection.query(query, logger: logger).collect()
    }
}

/// Statements that the worker and the operator commands both send; one home each.
enum AppStatements {
    /// Pauses an app with a readable reason and returns its id when the row changed. The worker's automatic
    /// pauses keep an earlier reason (`replacingReason: false`); an operator's pause replaces it.
    static func pause(_ appID: String, reason: String, replacingReason: Bool) -> PostgresQuery {
        """
        UPDATE push.apps SET paused_reason = \(reason), paused_at = now(), updated_at = now()
         WHERE id = \(appID) AND (paused_reason IS NULL OR \(replacingReason))
        RETURNING id
        """
    }
}
