/// A limit on in-flight requests from the round trips they take. Requests beyond what fills the path only wait
/// in a queue (this process's, the connection's or the server's), and an urgent notification waits behind
/// them. Like TCP Vegas and LEDBAT, it compares each window of answers with the shortest round trip seen
/// lately (the path's base delay): above ``Configuration/tolerance`` times the base plus
/// ``Configuration/slack`` it shrinks by their ratio, below it grows by ``Configuration/growth`` per window.
///
/// A window is judged by a low percentile of its round trips (``Configuration/percentile``), not by their
/// average. A standing queue delays every request behind it, the fastest included; a server whose answers
/// vary by tens of milliseconds (APNs from a real data centre), or a busy host that is late to read some
/// answers, leaves the fastest near the base. Judged by the average, answers spread over 30–80 ms read as a
/// queue on a 30 ms path, and the limit emptied the pipes to its minimum.
/// Pure; the caller passes the time.
public struct QueueingDelayLimit: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public struct Configuration: Sendable, Hashable {
        public var minimum: Int
        public var maximum: Int
        /// Round trips up to this many times the base delay count as a full pipe, not a queue.
        public var tolerance: Double
        /// Added to the target, so that on a path of a millisecond (loopback) scheduling noise is no queue.
        public var slack: Duration
        /// The base delay is the shortest round trip of the last one or two of these periods, so it follows a
        /// path that changed.
        public var baseWindow: Duration
        /// Growth per window of answers whose round trips stayed within the target.
        public var growth: Double
        /// The most one window of slow answers may take off the limit, as a factor.
        public var deepestCut: Double
        /// The round trip a window is judged by: this percentile of its answers' (0.1: all but the fastest
        /// tenth were slower).
        public var percentile: Double

        public init(minimum: Int = 16, maximum: Int = 1000, tolerance: Double = 1.25, slack: Duration = .milliseconds(10),
                    baseWindow: Duration = .seconds(30), growth: Double = 0.05, deepestCut: Double = 0.5,
                    percentile: Double = 0.1) {
            self.minimum = max(1, minimum)
            self.maximum = max(self.minimum, maximum)
            self.tolerance = max(1, tolerance)
            self.slack = slack
            self.baseWindow = baseWindow
            self.growth = max(0, growth)
            self.deepestCut = min(max(deepestCut, 0.01), 1)
            self.percentile = min(max(percentile, 0), 1)
        }
    }

    public let configuration: Configuration
    private var window: Double
    private var epochStart: Instant?
    private var epochMinimum: Duration?
    private var previousEpochMinimum: Duration?
    /// The round trips of the window being gathered.
    private var roundTrips: [Duration] = []

    /// Starts at the maximum: it only ever holds back a queue that was measured.
    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
        window = Double(configuration.maximum)
        roundTrips.reserveCapacity(configuration.maximum)
    }

    /// The current limit, between the minimum and the maximum.
    public var limit: Int { Int(window) }

    /// The shortest round trip of the current and the previous period, once one was recorded.
    public var baseDelay: Duration? {
        switch (epochMinimum, previousEpochMinimum) {
        case let (current?, previous?): return min(current, previous)
        case let (current, previous): return current ?? previous
        }
    }

    /// Round trips above this mean requests are queueing.
    public var target: Duration? {
        baseDelay.map { $0 * configuration.tolerance + configuration.slack }
    }

    /// Records the round trip of one answered request. Once a window's worth of answers (about one round
    /// trip) is in, their average decides the next limit.
    public mutating func record(_ roundTrip: Duration, now: Instant) {
        if let start = epochStart, start.duration(to: now) >= configuration.baseWindow {
            previousEpochMinimum = epochMinimum
            epochMinimum = nil
            epochStart = now
        } else if epochStart == nil {
            epochStart = now
        }
        epochMinimum = min(epochMinimum ?? roundTrip, roundTrip)

        roundTrips.append(roundTrip)
        guard roundTrips.count >= max(1, limit), let target else { return }
        // Once a window (about a round trip's answers, so a thousand at most): sorting them costs little.
        roundTrips.sort()
        let judged = roundTrips[min(roundTrips.count - 1, Int(Double(roundTrips.count) * configuration.percentile))]
        roundTrips.removeAll(keepingCapacity: true)
        if judged > target {
            let ratio = max(configuration.deepestCut, target.inSeconds / judged.inSeconds)
            window = max(Double(configuration.minimum), window * ratio)
        } else {
            window = min(Double(configuration.maximum), window * (1 + configuration.growth) + 1)
        }
    }
}
