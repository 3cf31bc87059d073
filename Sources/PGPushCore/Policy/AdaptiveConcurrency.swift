/// An AIMD limit on in-flight requests: halve on overload (429, 503), grow back by about one per
/// window of successes, like TCP congestion avoidance. Optionally, a small share of overloads per window is
/// tolerated as noise (``toleratedOverloadShare``). Pure; the caller passes the time.
///
/// With `slowStart`, a small initial limit grows by one per success (doubling per round trip) until the
/// first overload, like TCP slow start: a new app ramps up within a few round trips, yet a misconfigured one
/// (whose answers are all errors) never gets more than a handful of requests out before it is paused.
public struct AdaptiveConcurrency: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public let minimum: Int
    public let maximum: Int
    /// The factor applied on overload, in (0, 1).
    public let decreaseFactor: Double
    /// Overloads within this interval after a decrease count as the same event: one burst of 429s
    /// from a thousand in-flight streams must not collapse the limit to the minimum.
    public let coolDown: Duration
    /// Overloads a window of answers (one limit's worth) may hold without a decrease, as a share of the window.
    /// A provider answers a few 503s out of thousands now and then; halving on each would keep a busy app's
    /// limit at a few dozen, and an urgent notification would queue behind a broadcast for seconds. A real
    /// overload answers many: beyond this share the limit is cut as before. 0 cuts on the first overload.
    public let toleratedOverloadShare: Double
    private var window: Double
    private var windowAnswers = 0
    private var windowOverloads = 0
    private var slowStartThreshold: Double
    private var lastDecrease: Instant?

    /// The current limit, between ``minimum`` and ``maximum``.
    public var limit: Int { Int(window) }

    public init(
        initial: Int? = nil,
        minimum: Int = 1,
        maximum: Int = 1000,
        decreaseFactor: Double = 0.5,
        coolDown: Duration = .seconds(1),
        slowStart: Bool = false,
        toleratedOverloadShare: Double = 0
    ) {
        self.minimum = max(1, minimum)
        self.maximum = max(self.minimum, maximum)
        self.decreaseFactor = min(max(decreaseFactor, 0.01), 0.99)
        self.coolDown = coolDown
        self.toleratedOverloadShare = min(max(toleratedOverloadShare, 0), 1)
        self.window = Double(min(max(initial ?? self.maximum, self.minimum), self.maximum))
        self.slowStartThreshold = slowStart ? Double(self.maximum) : 0
    }

    /// Records a 429 or 503. Decreases the limit multiplicatively once the window's overloads exceed
    /// ``toleratedOverloadShare``, unless a decrease happened less than ``coolDown`` ago.
    /// - Returns: whether the limit was decreased.
    @discardableResult
    public mutating func recordOverload(now: Instant = .now) -> Bool {
        windowAnswers += 1
        windowOverloads += 1
        guard Double(windowOverloads) > toleratedOverloadShare * window.rounded(.down) else {
            startNewWindowIfFull()
            return false
        }
        if let lastDecrease, lastDecrease.duration(to: now) < coolDown {
            startNewWindowIfFull()
            return false
        }
        windowAnswers = 0
        windowOverloads = 0
        lastDecrease = now
        window = max(Double(minimum), (window * decreaseFactor).rounded(.down))
        slowStartThreshold = window
        return true
    }

    /// Records a success: the limit grows by 1/limit, so by about one per full window of successes
    /// (by one per success while slow start lasts).
    public mutating func recordSuccess() {
        let step = window < slowStartThreshold ? 1 : 1 / window
        window = min(Double(maximum), window + step)
        windowAnswers += 1
        startNewWindowIfFull()
    }

    private mutating func startNewWindowIfFull() {
        guard Double(windowAnswers) >= window.rounded(.down) else { return }
        windowAnswers = 0
        windowOverloads = 0
    }
}
