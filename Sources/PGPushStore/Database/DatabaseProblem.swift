import PGPushCore
import PostgresNIO

/// Why the database cannot take the worker's statements right now, read from an error: the cases a failover
/// or an outage produce, which the worker waits out instead of treating as a bug in a statement.
public enum DatabaseProblem: String, Sendable, Hashable, CustomStringConvertible {
    /// No connection: refused, reset, timed out, closed by the server, or a pooler that cannot reach it.
    case unreachable
    /// The server takes reads only (SQLSTATE 25006): a standby, or a primary not yet promoted behind the address.
    case readOnly
    /// The server is shutting down or starting up (SQLSTATE 57P01, 57P02, 57P03).
    case shuttingDown

    public var description: String {
        switch self {
        case .unreachable:
            return "the database is unreachable"
        case .readOnly:
            return "the database is read-only (a standby or a server in recovery; SQLSTATE 25006): results and claims wait until a primary answers"
        case .shuttingDown:
            return "the database is shutting down or starting up (SQLSTATE 57P01/57P02/57P03)"
        }
    }

    /// The problem `error` shows, or nil when it is not about the database's availability (a statement the
    /// server refused for its own reasons, say).
    public static func of(_ error: any Error) -> DatabaseProblem? {
        if let error = error as? PostgresTransactionError {
            if let inner = error.closureError ?? error.beginError ?? error.commitError { return of(inner) }
            return nil
        }
        if let error = error as? PGPushError {
            if error.code == .databaseUnavailable { return .unreachable }
            return error.underlying.flatMap(of)
        }
        guard let error = error as? PSQLError else { return nil }
        if let state = error.serverInfo?[.sqlState] {
            switch state {
            case "25006": return .readOnly
            case "57P01", "57P02", "57P03": return .shuttingDown
            default:
                // Class 08 is connection exceptions; PgBouncer reports a lost or unreachable server as 08P01.
                return state.hasPrefix("08") ? .unreachable : nil
            }
        }
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed,
             .sslUnsupported, .failedToAddSSLHandler:
            return .unreachable
        default:
            return nil
        }
    }
}
