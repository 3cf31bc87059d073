/// How fast one app can send from this worker right now, as far as claiming is concerned. An app that is
/// held back must not hold room that other apps could use, so the scheduler claims only a few seconds of its
/// sending at a time.
public struct AppThrottle: Sendable, Hashable {
    /// This worker's share of the app's `rate_limit`, in notifications per second; `nil` when unlimited.
    public var ratePerSecond: Double?
    /// The app's in-flight limit while it backs off after 429/503; `nil` while it is not backing off.
    public var backoffConcurrency: Int?

    public init(ratePerSecond: Double? = nil, backoffConcurrency: Int? = nil) {
        self.ratePerSecond = ratePerSecond
        self.backoffConcurrency = backoffConcurrency
    }

    var isThrottled: Bool { ratePerSecond != nil || backoffConcurrency != nil }
}
