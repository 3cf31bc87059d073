/// A snapshot of what the Web Push simulator has seen.
public struct WebPushSimulatorStatistics: Sendable, Hashable {
    /// A response status with its reason (`nil` for 201).
    public struct ResponseKey: Sendable, Hashable, CustomStringConvertible {
        public var status: Int
        public var reason: String?
        public var description: String { reason.map { "\(status) \($0)" } ?? "\(status)" }

        public init(status: Int, reason: String?) {
            self.status = status
            self.reason = reason
        }
    }

    /// Requests answered or dropped.
    public var requestsTotal: Int = 0
    /// Responses sent, by status and reason.
    public var responses: [ResponseKey: Int] = [:]
    /// Requests decided, by the HTTP version they came over.
    public var requestsByHTTPVersion: [WebPushHTTPVersion: Int] = [:]
    /// `POST /push/<id>` requests decided.
    public var pushRequests: Int = 0
    /// Pushes to an id the simulator never made (and no prefix rule names), answered 404.
    public var unknownSubscriptions: Int = 0
    /// TLS connections accepted (both HTTP versions).
    public var connectionsAccepted: Int = 0
    /// Connections that negotiated HTTP/2 (ALPN `h2`).
    public var http2Connections: Int = 0
    /// Connections served HTTP/1.1.
    public var http1Connections: Int = 0
    /// The most streams open at once on any single HTTP/2 connection.
    public var maximumConcurrentStreamsObserved: Int = 0
    /// HTTP/2 streams opened beyond the SETTINGS_MAX_CONCURRENT_STREAMS in force (refused with REFUSED_STREAM).
    public var streamLimitViolations: Int = 0
    /// HTTP/2 streams opened beyond the advertised limit before the client acknowledged the first SETTINGS.
    public var streamsBeyondLimitBeforeSettingsAcknowledged: Int = 0
    /// GOAWAY frames sent, or HTTP/1.1 connections closed after an answer, by the fault injector.
    public var goAwaysSent: Int = 0
    /// GOAWAY frames received from clients (a client closing its connection sends one).
    public var goAwaysReceived: Int = 0
    /// Connections closed abruptly by the fault injector.
    public var resets: Int = 0

    public init() {}

    /// How many responses had this status (any reason).
    public func count(status: Int) -> Int {
        responses.reduce(0) { $0 + ($1.key.status == status ? $1.value : 0) }
    }

    /// How many responses had this reason (`BadJwtToken`, `Gone`, …).
    public func count(reason: String) -> Int {
        responses.reduce(0) { $0 + ($1.key.reason == reason ? $1.value : 0) }
    }
}

extension WebPushSimulatorStatistics: SimulatorTransportStatistics {}

extension StatisticsRecorder where Statistics == WebPushSimulatorStatistics {
    convenience init() { self.init(WebPushSimulatorStatistics()) }
}
