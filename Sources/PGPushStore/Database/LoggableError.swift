import PGPushCore
import PostgresNIO

/// How the worker and the CLI put an error into a log line: what went wrong, readable, without secrets.
///
/// `PSQLError`'s own `description` hides everything (it cannot know what is safe), and its
/// `debugDescription` carries the statement and the server's detail, which may quote a row: a whole device
/// token, say. This keeps the server's message and SQLSTATE, or the connection failure underneath, and
/// passes the result through ``LogRedaction``.
public enum LoggableError {
    public static func describe(_ error: any Error) -> String {
        LogRedaction.redact(text(of: error))
    }

    private static func text(of error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] {
            let state = error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? ""
            return "PostgreSQL: \(message)\(state)"
        }
        if let underlying = error.underlying {
            return "PostgreSQL \(error.code): \(underlying)"
        }
        return "PostgreSQL \(error.code)"
    }
}
