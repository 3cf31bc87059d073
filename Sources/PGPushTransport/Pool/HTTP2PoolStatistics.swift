/// A snapshot of an ``HTTP2ConnectionPool``'s state, for metrics and tests.
public struct HTTP2PoolStatistics: Sendable, Hashable {
    /// Connections that completed the HTTP/2 preface and are not yet closed (ready or draining).
    public var connectionsOpen: Int = 0
    /// Connections still taking new streams.
    public var connectionsReady: Int = 0
    /// Streams currently open across all connections.
    public var streamsInFlight: Int = 0
    /// Callers waiting for a free stream slot.
    public var callersWaiting: Int = 0
    /// GOAWAY frames received since the pool started.
    public var goAwaysReceived: Int = 0
    /// Connections opened to replace an earlier one (after GOAWAY, a reset, a retiring response or a failure).
    public var reconnects: Int = 0
    /// Connection attempts that failed (TCP, TLS, or no HTTP/2 SETTINGS in time).
    public var connectFailures: Int = 0
    /// Requests written to a stream since the pool started.
    public var requestsSent: Int = 0
    /// The effective concurrent-stream limit of each ready connection: the server's live value capped by the client.
    public var effectiveStreamLimits: [Int] = []
    /// The most streams ever open at once on any single connection.
    public var peakStreamsPerConnection: Int = 0

    public init() {}
}
