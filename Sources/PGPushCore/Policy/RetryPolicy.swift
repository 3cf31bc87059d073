import struct Foundation.Date
import struct Foundation.TimeInterval

/// What to do with a token whose attempt failed transiently.
public enum RetryDecision: Sendable, Hashable {
    /// Send again, not before this time.
    case retry(at: Date)
    case giveUp(GiveUpReason)
}

public enum GiveUpReason: String, Sendable, Hashable {
    /// The token has had ``RetryPolicy/maxAttempts`` attempts.
    case attemptsExhausted
    /// The next attempt would come at or after the notification's expiry.
    case wouldExceedExpiry
}

/// Exponential backoff with full jitter, a cap, and an attempt limit.
///
/// With the defaults the waits before attempts 2…8 are drawn from [0, 5 s], [0, 10 s], … [0, 320 s]:
/// at most about 11 minutes in total, so eight attempts fit well within an hour even with queueing delays.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts per token, counting the first.
    public var maxAttempts: Int
    /// The cap of the jitter window before attempt 2; it doubles for every later attempt.
    public var baseDelay: Duration
    /// The largest jitter window.
    public var maxDelay: Duration

    public init(maxAttempts: Int = 8, baseDelay: Duration = .seconds(5), maxDelay: Duration = .seconds(600)) {
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// The upper bound of the jitter window before `attempt`: `min(maxDelay, baseDelay · 2^(attempt−2))`,
    /// and zero for the first attempt.
    public func delayCap(beforeAttempt attempt: Int) -> Duration {
        guard attempt >= 2 else { return .zero }
        // Doubles instead of Duration arithmetic: 2^60 seconds would overflow Duration.
        let exponent = Double(min(attempt - 2, 62))
        let capSeconds = min(maxDelay.inSeconds, baseDelay.inSeconds * Double.pow2(exponent))
        return .milliseconds(Int64(max(0, capSeconds) * 1000))
    }

    /// Full jitter: uniform in [0, ``delayCap(beforeAttempt:)``], at millisecond resolution.
    public func delay(beforeAttempt attempt: Int, using rng: inout some RandomNumberGenerator) -> Duration {
        let capMilliseconds = Self.milliseconds(delayCap(beforeAttempt: attempt))
        guard capMilliseconds > 0 else { return .zero }
        return .milliseconds(Int64.random(in: 0...capMilliseconds, using: &rng))
    }

    /// Decides the fate of a token whose attempt number `failedAttempt` (1-based) failed transiently.
    /// - Parameter expiresAt: When the notification stops being worth sending; `nil` for never.
    public func decide(
        failedAttempt: Int,
        now: Date,
        expiresAt: Date?,
        rng: inout some RandomNumberGenerator
    ) -> RetryDecision {
        guard failedAttempt < maxAttempts else { return .giveUp(.attemptsExhausted) }
        let wait = delay(beforeAttempt: failedAttempt + 1, using: &rng)
        let next = now.addingTimeInterval(wait.inSeconds)
        if let expiresAt, next >= expiresAt {
            return .giveUp(.wouldExceedExpiry)
        }
        return .retry(at: next)
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        let parts = duration.components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}

extension Double {
    fileprivate static func pow2(_ exponent: Double) -> Double {
        Double(sign: .plus, exponent: Int(exponent), significand: 1)
    }
}
