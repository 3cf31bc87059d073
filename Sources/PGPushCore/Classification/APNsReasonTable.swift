/// Every (status, reason) pair documented for the APNs provider API, and what each means for pgpush.
public enum APNsReasonTable {
    /// What a known reason means, before the reason text and timestamp are attached.
    public enum Entry: Sendable, Hashable {
        case tokenDead
        case tokenWrongForTopicOrEnvironment
        case configurationError
        case retry(reconnect: Bool)
        /// 429 `TooManyProviderTokenUpdates`: retry later, and do not mint again.
        case providerTokenStorm
        case refreshProviderToken
        case permanentFailure
        /// The request as the job built it can never succeed, for any token.
        case jobError

        func deliveryClass(reason: String, timestampMilliseconds: Int64?) -> DeliveryClass {
            switch self {
            case .tokenDead: .tokenDead(reason: reason, timestampMilliseconds: timestampMilliseconds)
            case .tokenWrongForTopicOrEnvironment: .tokenWrongForTopicOrEnvironment(reason: reason)
            case .configurationError: .configurationError(reason: reason)
            case .retry(let reconnect): .retryLater(reason: reason, reconnect: reconnect)
            case .providerTokenStorm: .retryLater(reason: reason, reconnect: false)
            case .refreshProviderToken: .refreshProviderTokenAndRetry(reason: reason)
            case .permanentFailure: .permanentFailure(reason: reason)
            case .jobError: .jobError(reason: reason)
            }
        }
    }

    public struct Key: Sendable, Hashable {
        public var status: Int
        public var reason: String
        public init(status: Int, reason: String) {
            self.status = status
            self.reason = reason
        }
    }

    /// The reason APNs gives when too many provider tokens were minted for one key.
    public static let tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"

    /// The documented table (see APNS.md). Tests iterate it, so every row is checked.
    public static let rows: [(status: Int, reason: String, entry: Entry)] = [
        (410, "Unregistered", .tokenDead),
        (410, "ExpiredToken", .tokenDead),

        (400, "BadDeviceToken", .tokenWrongForTopicOrEnvironment),
        (400, "DeviceTokenNotForTopic", .tokenWrongForTopicOrEnvironment),
        (400, "BadCollapseId", .jobError),
        (400, "BadExpirationDate", .jobError),
        (400, "BadMessageId", .configurationError),
        (400, "BadPriority", .jobError),
        (400, "BadTopic", .configurationError),
        (400, "DuplicateHeaders", .configurationError),
        (400, "InvalidPushType", .jobError),
        (400, "MissingDeviceToken", .configurationError),
        (400, "MissingTopic", .configurationError),
        (400, "PayloadEmpty", .jobError),
        (400, "TopicDisallowed", .configurationError),
        (400, "IdleTimeout", .retry(reconnect: true)),

        (403, "ExpiredProviderToken", .refreshProviderToken),
        (403, "BadCertificate", .configurationError),
        (403, "BadCertificateEnvironment", .configurationError),
        (403, "Forbidden", .configurationError),
        (403, "InvalidProviderToken", .configurationError),
        (403, "MissingProviderToken", .configurationError),
        (403, "UnrelatedKeyIdInToken", .configurationError),
        (403, "BadEnvironmentKeyIdInToken", .configurationError),
        (403, "BadEnvironmentKeyInToken", .configurationError),

        (404, "BadPath", .configurationError),
        (405, "MethodNotAllowed", .configurationError),
        (413, "PayloadTooLarge", .jobError),

        (429, "TooManyRequests", .retry(reconnect: false)),
        (429, tooManyProviderTokenUpdates, .providerTokenStorm),

        (500, "InternalServerError", .retry(reconnect: false)),
        (503, "ServiceUnavailable", .retry(reconnect: false)),
        (503, "Shutdown", .retry(reconnect: true)),
    ]

    static let entries: [Key: Entry] = Dictionary(
        uniqueKeysWithValues: rows.map { (Key(status: $0.status, reason: $0.reason), $0.entry) }
    )

    static let entriesByReason: [String: Entry] = Dictionary(
        rows.map { ($0.reason, $0.entry) }, uniquingKeysWith: { first, _ in first }
    )

    /// The entry for a reason regardless of status (used for GOAWAY debug data, which has no status).
    public static func entry(forReason reason: String) -> Entry? {
        entriesByReason[reason]
    }
}
