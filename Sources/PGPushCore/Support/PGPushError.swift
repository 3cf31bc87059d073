/// The error type of pgpush.
///
/// `description` is safe to log: it holds the code and a message written by pgpush. The underlying
/// error or detail may carry secrets (a key path's contents, a JWT, a password in a URL), so only
/// `debugDescription` shows it.
public struct PGPushError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What kind of failure this is. Extensible without breaking callers: new codes are new `static let`s.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidConfiguration
            case invalidCredential
            case credentialUnreadable
            case databaseUnavailable
            case invalidInput
            case apnsConfiguration
            case `internal`
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// A configuration value is missing or malformed.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// A key or certificate could not be parsed or used (for example not a P-256 key).
        public static let invalidCredential = Code(.invalidCredential)
        /// A key or certificate could not be read from where the configuration says it lives.
        public static let credentialUnreadable = Code(.credentialUnreadable)
        /// PostgreSQL could not be reached or refused the work.
        public static let databaseUnavailable = Code(.databaseUnavailable)
        /// Input from a producer or operator is invalid (payload, device token, push type, …).
        public static let invalidInput = Code(.invalidInput)
        /// APNs rejected the app's configuration or credential (e.g. `BadTopic`, `InvalidProviderToken`).
        public static let apnsConfiguration = Code(.apnsConfiguration)
        /// A bug or an unexpected state inside pgpush.
        public static let `internal` = Code(.internal)

        public var description: String { base.rawValue }
    }

    public var code: Code
    /// A readable message. It must never contain secrets or whole device tokens.
    public var message: String
    /// The error that caused this one; shown only by `debugDescription`.
    public var underlying: (any Error)?
    /// Extra detail that may be sensitive; shown only by `debugDescription`.
    public var detail: String?
    public var file: String
    public var line: Int

    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - message: Safe-to-log text; never put secrets here.
    ///   - detail: Optional sensitive detail, kept out of `description`.
    ///   - underlying: Optional cause, kept out of `description`.
    public init(
        _ code: Code,
        _ message: String,
        detail: String? = nil,
        underlying: (any Error)? = nil,
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.message = message
        self.detail = detail
        self.underlying = underlying
        self.file = file
        self.line = line
    }

    public var description: String {
        "\(code): \(message)"
    }

    public var debugDescription: String {
        var text = "PGPushError(code: \(code), message: \(message)"
        if let detail { text += ", detail: \(detail)" }
        if let underlying { text += ", underlying: \(String(reflecting: underlying))" }
        text += ", at: \(file):\(line))"
        return text
    }
}
