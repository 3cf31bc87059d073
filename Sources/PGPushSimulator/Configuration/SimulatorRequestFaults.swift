/// Errors injected into one of the APIs that have no device token to choose by (the broadcast channel
/// management API, broadcast sends): the first ``failFirst`` requests fail, then a seeded fraction ``rate``.
/// Counting restarts whenever the faults change (``APNsSimulator/updateFaults(_:)``).
public struct SimulatorRequestFaults: Sendable, Hashable {
    /// How many requests, counted from the start or the last change of the faults, are answered ``status``.
    /// Default 0.
    public var failFirst: Int = 0
    /// The status of the injected errors: 429 (`TooManyRequests`), 500 (`InternalServerError`) or 503
    /// (`ServiceUnavailable`); any other status gets the reason `InternalServerError`. Default 503.
    public var status: Int = 503
    /// Fraction of the later requests answered ``status``, chosen from the faults' seed and the request's
    /// number. Default 0.
    public var rate: Double = 0

    /// No faults.
    public init() {}

    /// The reason APNs gives with ``status``.
    var reason: String {
        switch status {
        case 429: "TooManyRequests"
        case 503: "ServiceUnavailable"
        default: "InternalServerError"
        }
    }

    /// The error for the API's `requestNumber`-th request (1-based, since the faults last changed), if any.
    func rejection(requestNumber: Int, seed: UInt64, salt: UInt64) -> SimulatorRejection? {
        if requestNumber <= failFirst { return SimulatorRejection(status: status, reason: reason) }
        guard rate > 0 else { return nil }
        let draw = FaultHash.unit(FaultHash.mix(FaultHash.mix(seed ^ salt) ^ UInt64(requestNumber)))
        return draw < rate ? SimulatorRejection(status: status, reason: reason) : nil
    }
}
