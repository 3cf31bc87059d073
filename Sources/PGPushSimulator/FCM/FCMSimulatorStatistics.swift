/// A snapshot of what the FCM simulator has seen.
public struct FCMSimulatorStatistics: Sendable, Hashable {
    /// A response status with its code: the FcmError `errorCode` when the answer has one, else the error's
    /// `status` (`UNAUTHENTICATED`, …), or the OAuth `error` (`invalid_grant`) at the token endpoint;
    /// `nil` for 200.
    public struct ResponseKey: Sendable, Hashable, CustomStringConvertible {
        public var status: Int
        public var code: String?
        public var description: String { code.map { "\(status) \($0)" } ?? "\(status)" }

        public init(status: Int, code: String?) {
            self.status = status
            self.code = code
        }
    }

    /// Requests answered or dropped (both endpoints, and unknown paths).
    public var requestsTotal: Int = 0
    /// Responses sent, by status and code.
    public var responses: [ResponseKey: Int] = [:]
    /// `messages:send` requests decided (answered or not yet written).
    public var sendRequests: Int = 0
    /// `messages:send` requests with `validate_only: true` answered 200 (never in the ledger).
    public var validatedOnly: Int = 0
    /// Token-endpoint requests decided.
    public var tokenRequests: Int = 0
    /// Access tokens issued, per service-account client email.
    public var tokenExchanges: [String: Int] = [:]
    /// Token-endpoint requests refused (any 400).
    public var tokenExchangesRefused: Int = 0
    /// The most streams open at once on any single connection.
    public var maximumConcurrentStreamsObserved: Int = 0
    /// Streams opened beyond the SETTINGS_MAX_CONCURRENT_STREAMS in force (refused with REFUSED_STREAM).
    public var streamLimitViolations: Int = 0
    /// Streams opened beyond the advertised limit before the client acknowledged the first SETTINGS; accepted,
    /// up to 100 per connection.
    public var streamsBeyondLimitBeforeSettingsAcknowledged: Int = 0
    /// TLS connections accepted.
    public var connectionsAccepted: Int = 0
    /// GOAWAY frames sent by the fault injector.
    public var goAwaysSent: Int = 0
    /// GOAWAY frames received from clients (a client closing its connection sends one).
    public var goAwaysReceived: Int = 0
    /// Connections closed abruptly by the fault injector.
    public var resets: Int = 0

    public init() {}

    /// All access tokens issued.
    public var tokenExchangesTotal: Int { tokenExchanges.values.reduce(0, +) }

    /// How many responses had this status (any code).
    public func count(status: Int) -> Int {
        responses.reduce(0) { $0 + ($1.key.status == status ? $1.value : 0) }
    }

    /// How many responses had this code (`UNREGISTERED`, `UNAUTHENTICATED`, `invalid_grant`, …).
    public func count(code: String) -> Int {
        responses.reduce(0) { $0 + ($1.key.code == code ? $1.value : 0) }
    }
}

extension FCMSimulatorStatistics: SimulatorTransportStatistics {}

extension StatisticsRecorder where Statistics == FCMSimulatorStatistics {
    convenience init() { self.init(FCMSimulatorStatistics()) }

    func recordResponse(status: Int, code: String?) {
        update {
            $0.requestsTotal += 1
            $0.responses[FCMSimulatorStatistics.ResponseKey(status: status, code: code), default: 0] += 1
        }
    }
}
