import Foundation
import Logging
import PGPushCLISupport
import PGPushStore
import PostgresNIO

/// One short-lived connection for a one-shot operator command: opened, used, closed.
///
/// Operator commands run a handful of statements, so a pool (and its `run()` task) would only add moving parts.
func withOperatorConnection<Result: Sendable>(
    _ url: DatabaseURL,
    logger: Logger,
    _ body: (PostgresConnection) async throws -> Result
) async throws -> Result {
    let connection: PostgresConnection
    do {
        connection = try await connectToDatabase(url, logger: logger)
    } catch let failure as ConnectionFailure {
        throw OperatorError(.failed, failure.description)
    }
    do {
        let result = try await body(connection)
        try? await connection.close()
        return result
    } catch {
        try? await connection.close()
        throw error
    }
}

/// ``withOperatorConnection(_:logger:_:)`` with the connection's statements: the store's operator methods.
func withOperatorStore<Result: Sendable>(
    _ url: DatabaseURL,
    logger: Logger,
    _ body: (OperatorStore) async throws -> Result
) async throws -> Result {
    try await withOperatorConnection(url, logger: logger) { connection in
        try await body(OperatorStore(connection: connection, logger: logger))
    }
}

/// Formats timestamps in JSON and tables the same way everywhere: UTC, second precision.
enum Timestamp {
    static func string(_ date: Date?) -> String? {
        guard let date else { return nil }
        return ISO8601DateFormatter.string(from: date, timeZone: .gmt, formatOptions: [.withInternetDateTime])
    }

    /// Parses `2026-11-22T10:00:00Z`, with or without fractional seconds, or a bare date `2026-11-22` (UTC midnight).
    static func parse(_ text: String) -> Date? {
        let withFraction = ISO8601DateFormatter()
        withFraction.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = withFraction.date(from: text) { return date }
        let plain = ISO8601DateFormatter()
        plain.formatOptions = [.withInternetDateTime]
        if let date = plain.date(from: text) { return date }
        let day = ISO8601DateFormatter()
        day.formatOptions = [.withFullDate]
        day.timeZone = .gmt
        return day.date(from: text)
    }
}
