import Synchronization

/// A snapshot of what the simulator has seen.
public struct SimulatorStatistics: Sendable, Hashable {
    /// A response status with its reason (`nil` for 200).
    public struct ResponseKey: Sendable, Hashable, CustomStringConvertible {
        public var status: Int
        public var reason: String?
        public var description: String { reason.map { "\(status) \($0)" } ?? "\(status)" }
    }

    /// Requests that reached the request handler (complete or not).
    public var requestsTotal: Int = 0
    /// Responses sent, by status and reason.
    public var responses: [ResponseKey: Int] = [:]
    /// The most streams open at once on any single connection.
    public var maximumConcurrentStreamsObserved: Int = 0
    /// Streams opened beyond the SETTINGS_MAX_CONCURRENT_STREAMS advertised at the time (refused).
    public var streamLimitViolations: Int = 0
    /// Streams opened beyond the advertised limit before the client acknowledged the simulator's first SETTINGS
    /// (so before it can have known the limit); accepted, up to 100 per connection.
    public var streamsBeyondLimitBeforeSettingsAcknowledged: Int = 0
    /// TLS connections accepted.
    public var connectionsAccepted: Int = 0
    /// GOAWAY frames sent by the fault injector.
    public var goAwaysSent: Int = 0
    /// GOAWAY frames received from clients (a client closing its connection sends one).
    public var goAwaysReceived: Int = 0
    /// Connections closed abruptly by the fault injector.
    public var resets: Int = 0
    /// Distinct provider tokens seen per `teamID.keyID`.
    public var distinctProviderTokens: [String: Int] = [:]
    /// How many `429 TooManyProviderTokenUpdates` were sent.
    public var tooManyProviderTokenUpdatesSent: Int = 0

    /// How many responses had this status (any reason).
    public func count(status: Int) -> Int {
        responses.reduce(0) { $0 + ($1.key.status == status ? $1.value : 0) }
    }

    /// How many responses had this reason.
    public func count(reason: String) -> Int {
        responses.reduce(0) { $0 + ($1.key.reason == reason ? $1.value : 0) }
    }
}

/// Thread-safe accumulator behind a simulator's statistics snapshot (``SimulatorStatistics`` for APNs,
/// ``FCMSimulatorStatistics`` for FCM).
final class StatisticsRecorder<Statistics: Sendable>: Sendable {
    private let state: Mutex<Statistics>

    init(_ initial: Statistics) {
        self.state = Mutex(initial)
    }

    var snapshot: Statistics { state.withLock { $0 } }

    func update(_ body: (inout Statistics) -> Void) {
        state.withLock { body(&$0) }
    }
}

/// The APNs simulator's recorder.
typealias SimulatorStatisticsRecorder = StatisticsRecorder<SimulatorStatistics>

extension StatisticsRecorder where Statistics == SimulatorStatistics {
    convenience init() { self.init(SimulatorStatistics()) }

    func recordResponse(status: Int, reason: String?) {
        update {
            $0.requestsTotal += 1
            $0.responses[SimulatorStatistics.ResponseKey(status: status, reason: reason), default: 0] += 1
        }
    }
}

extension SimulatorStatistics: SimulatorTransportStatistics {}
