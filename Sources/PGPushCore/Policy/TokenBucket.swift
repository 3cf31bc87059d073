/// A token-bucket rate limiter. Pure: the caller passes the time, so tests never sleep.
///
/// Reservation style: ``take(_:now:)`` always grants the tokens, possibly into debt, and returns how
/// long the caller must wait before using them. Concurrent waiters thus get distinct, fair slots
/// instead of all waking at once and retrying. A caller that reserves and then does not send has
/// only made the limiter more conservative.
public struct TokenBucket: Sendable {
    public typealias Instant = ContinuousClock.Instant

    /// Messages per second. `.infinity` means unlimited.
    public private(set) var ratePerSecond: Double
    /// The most tokens that can accumulate while idle, i.e. the largest burst.
    public private(set) var burst: Double
    private var tokens: Double
    private var updatedAt: Instant?

    /// Rates at or below zero are raised to this, so a misconfigured rate stalls a sender instead of dividing by zero.
    public static let minimumRate = 0.001
    private static let longestWait: Double = 365 * 24 * 3600

    /// Starts full.
    public init(ratePerSecond: Double, burst: Double) {
        self.ratePerSecond = Self.sanitized(ratePerSecond)
        self.burst = max(1, burst)
        self.tokens = self.burst
    }

    /// Takes `n` tokens at `now`.
    /// - Returns: `nil` when they were available immediately; otherwise how long to wait before sending
    ///   (the tokens are already reserved: do not call `take` again for the same messages).
    public mutating func take(_ n: Int = 1, now: Instant) -> Duration? {
        guard ratePerSecond.isFinite else { return nil }
        refill(now: now)
        tokens -= Double(n)
        guard tokens < 0 else { return nil }
        // Clamped to a year so an absurd debt at a tiny rate cannot overflow Duration.
        let waitSeconds = min(-tokens / ratePerSecond, Self.longestWait)
        return .nanoseconds(Int64((waitSeconds * 1e9).rounded(.up)))
    }

    /// The tokens available at `now` (negative while reservations are outstanding).
    public func available(now: Instant) -> Double {
        var copy = self
        copy.refill(now: now)
        return copy.tokens
    }

    /// Changes the rate, e.g. when this worker's share of the app's limit changes. Tokens accrued since
    /// the last `take` are counted at the new rate. The burst stays unless given.
    public mutating func setRate(_ ratePerSecond: Double, burst: Double? = nil) {
        self.ratePerSecond = Self.sanitized(ratePerSecond)
        if let burst {
            self.burst = max(1, burst)
            tokens = min(tokens, self.burst)
        }
    }

    private mutating func refill(now: Instant) {
        defer { updatedAt = max(updatedAt ?? now, now) }
        guard let updatedAt, now > updatedAt else { return }
        tokens = min(burst, tokens + updatedAt.duration(to: now).inSeconds * ratePerSecond)
    }

    private static func sanitized(_ rate: Double) -> Double {
        rate.isNaN || rate <= 0 ? minimumRate : rate
    }
}
