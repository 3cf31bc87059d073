import PostgresNIO

/// What a call of ``PGPushClient`` throws: the database's answer, with the field it names.
///
/// The SQL API validates every call in the database and raises errors with the parameter in the error's
/// `COLUMN` field (`tokens`, `payload`, `fcm`, `localized`, …), which is ``field`` here:
///
/// ```swift
/// do {
///     _ = try await push.enqueue(EnqueueRequest(app: "news", payload: payload, audience: .tokens([token])))
/// } catch let error as PGPushClientError where error.code == .invalidInput {
///     // error.field == "tokens", error.message == "tokens contains an invalid device token …"
/// }
/// ```
public struct PGPushClientError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure, for branching; ``sqlState`` and ``field`` say more.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Base: String {
            case invalidInput, unknown, permissionDenied, database
        }

        let base: Base

        /// The database refused a value: a check (`23514`), a missing value (`23502`), a malformed one (class `22`).
        public static let invalidInput = Code(base: .invalidInput)
        /// The call names something that does not exist, or not for this login: an app (`23503`), a job, a device
        /// or an apns-id (`P0002`).
        public static let unknown = Code(base: .unknown)
        /// The login may not do this: no `pgpush_producer` role, or no grant for the app (`42501`).
        public static let permissionDenied = Code(base: .permissionDenied)
        /// Anything else: a lost connection, a closed pool, a server error outside the API's validation.
        public static let database = Code(base: .database)

        public var description: String { base.rawValue }
    }

    public var code: Code
    /// The parameter the database named (the error's `COLUMN` field: `PSQLError.serverInfo[.columnName]`).
    public var field: String?
    /// The SQLSTATE, such as `23514`; `nil` when no server answered.
    public var sqlState: String?
    /// The database's message (`tokens contains an invalid device token 'abc': …`), or what failed on the way.
    public var message: String
    /// The database's hint, when it gave one.
    public var hint: String?
    /// The error this was made from (a `PSQLError`, usually).
    public var underlying: (any Error)?

    public init(
        code: Code, field: String? = nil, sqlState: String? = nil, message: String, hint: String? = nil,
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.field = field
        self.sqlState = sqlState
        self.message = message
        self.hint = hint
        self.underlying = underlying
    }

    public var description: String {
        var text = "PGPushClientError(\(code)"
        if let field { text += ", field: \(field)" }
        if let sqlState { text += ", SQLSTATE \(sqlState)" }
        return text + "): \(message)"
    }

    /// The code of a SQLSTATE the SQL API raises.
    static func code(sqlState: String) -> Code {
        switch sqlState {
        case "42501": .permissionDenied
        case "23503", "P0002", "42704": .unknown
        case _ where sqlState.hasPrefix("22") || sqlState.hasPrefix("23"): .invalidInput
        default: .database
        }
    }

    /// `error` as a client error; a cancellation stays one.
    static func wrapping(_ error: any Error) -> any Error {
        switch error {
        case let error as PGPushClientError:
            return error
        case is CancellationError:
            return error
        case let error as PSQLError:
            if let info = error.serverInfo, let sqlState = info[.sqlState] {
                return PGPushClientError(
                    code: code(sqlState: sqlState), field: info[.columnName], sqlState: sqlState,
                    message: info[.message] ?? "the database refused the call", hint: info[.hint], underlying: error)
            }
            return PGPushClientError(code: .database, message: "the database call failed: \(error.code)", underlying: error)
        default:
            return PGPushClientError(code: .database, message: "\(error)", underlying: error)
        }
    }
}
