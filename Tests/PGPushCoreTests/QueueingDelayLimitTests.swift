import PGPushCore
import Testing

/// The in-flight limit from round trips alone: no network, no clock.
@Suite struct QueueingDelayLimitTests {
    let t0 = ContinuousClock.now
    typealias Limit = QueueingDelayLimit

    /// Records one window's worth of answers (the current limit) with this round trip.
    func window(_ limit: inout Limit, _ roundTrip: Duration, at now: ContinuousClock.Instant) {
        for _ in 0..<limit.limit { limit.record(roundTrip, now: now) }
    }

    @Test func roundTripsWithinTheTargetNeverShrinkTheLimit() {
        var limit = Limit(configuration: .init(minimum: 16, maximum: 1000, tolerance: 1.5, slack: .milliseconds(15)))
        #expect(limit.limit == 1000, "it starts at the maximum")
        window(&limit, .milliseconds(30), at: t0)
        #expect(limit.target == .milliseconds(60), "1.5 × the 30 ms base plus 15 ms")
        for i in 1...20 { window(&limit, .milliseconds(55), at: t0 + .milliseconds(100 * i)) }
        #expect(limit.limit == 1000)
    }

    @Test func aQueueShrinksTheLimitByTheRatioOfItsDelayAtMostHalvingPerWindow() {
        var limit = Limit(configuration: .init(minimum: 16, maximum: 1000, tolerance: 1.5, slack: .milliseconds(15)))
        window(&limit, .milliseconds(30), at: t0)
        // Answers take 120 ms where 60 would do: half of the requests only queue.
        window(&limit, .milliseconds(120), at: t0 + .milliseconds(200))
        #expect(limit.limit == 500)
        // Ten times the target is still one halving per window: one slow burst must not collapse the limit.
        window(&limit, .milliseconds(600), at: t0 + .milliseconds(400))
        #expect(limit.limit == 250)
        for i in 0..<20 { window(&limit, .seconds(1), at: t0 + .seconds(1 + i)) }
        #expect(limit.limit == 16, "never below the minimum")
    }

    /// The defaults: on a 30 ms path, answers after 55 ms already mean a queue. With the earlier 1.5 × base +
    /// 15 ms (60 ms here), urgent one-token jobs during a broadcast waited behind it: p99 172–177 ms against
    /// 123–135 ms (BENCHMARKS.md).
    @Test func byDefaultAQueueOfAQuarterOfTheBaseDelayShrinksTheLimit() {
        var limit = Limit()
        window(&limit, .milliseconds(30), at: t0)
        #expect(limit.target == .milliseconds(47.5), "1.25 × the 30 ms base plus 10 ms")
        window(&limit, .milliseconds(55), at: t0 + .milliseconds(100))
        #expect(limit.limit < 1000)
        #expect(limit.limit == Int(1000 * 47.5 / 55))
    }

    /// Round trips spread evenly over `low`…`low + spread` ms, in a shuffled order, one window's worth.
    func jitteryWindow(_ limit: inout Limit, low: Int, spread: Int, at now: ContinuousClock.Instant) {
        let count = limit.limit
        for k in 0..<count { limit.record(.milliseconds(low + (k * 37) % (spread + 1)), now: now) }
    }

    /// A server whose answers take 30–80 ms at random (APNs from a real data centre) is no queue: the fastest
    /// tenth of every window stays near the 30 ms base. Judged by the average (55 ms against a 47.5 ms target),
    /// the limit fell window after window to its minimum and emptied the pipes.
    @Test func aServersJitterIsNoQueue() {
        var limit = Limit()
        for i in 0..<50 { jitteryWindow(&limit, low: 30, spread: 50, at: t0 + .milliseconds(100 * i)) }
        #expect(limit.baseDelay == .milliseconds(30))
        #expect(limit.limit == 1000)
    }

    /// A standing queue delays every answer, the fastest too: 40 ms of queue on top of the same jitter shrinks
    /// the limit, by the fastest tenth's delay against the target.
    @Test func aQueueUnderJitterStillShrinksTheLimit() {
        var limit = Limit()
        jitteryWindow(&limit, low: 30, spread: 50, at: t0)
        jitteryWindow(&limit, low: 70, spread: 50, at: t0 + .milliseconds(100))
        #expect(limit.limit < 1000)
        #expect(limit.limit >= 500, "at most one halving a window")
        for i in 2..<40 { jitteryWindow(&limit, low: 70, spread: 50, at: t0 + .milliseconds(100 * i)) }
        #expect(limit.limit == 16)
    }

    @Test func onceTheQueueDrainsTheLimitGrowsBackToTheMaximum() {
        var limit = Limit(configuration: .init(minimum: 16, maximum: 1000, growth: 0.05))
        window(&limit, .milliseconds(30), at: t0)
        window(&limit, .milliseconds(300), at: t0 + .milliseconds(100))
        let shrunk = limit.limit
        #expect(shrunk == 500)
        window(&limit, .milliseconds(31), at: t0 + .milliseconds(200))
        #expect(limit.limit == Int(500 * 1.05 + 1), "a twentieth and one more per window")
        for i in 0..<200 { window(&limit, .milliseconds(31), at: t0 + .milliseconds(300 + 10 * i)) }
        #expect(limit.limit == 1000, "capped at the maximum")
    }

    @Test func theBaseDelayFollowsAPathThatChanged() {
        var limit = Limit(configuration: .init(minimum: 16, maximum: 1000, tolerance: 1.5, slack: .zero, baseWindow: .seconds(10)))
        limit.record(.milliseconds(2), now: t0)
        #expect(limit.baseDelay == .milliseconds(2))
        // The path now takes 40 ms: the old minimum is kept for one more period, then forgotten.
        limit.record(.milliseconds(40), now: t0 + .seconds(10))
        #expect(limit.baseDelay == .milliseconds(2))
        limit.record(.milliseconds(40), now: t0 + .seconds(20))
        #expect(limit.baseDelay == .milliseconds(40))
        #expect(limit.target == .milliseconds(60))
    }

    @Test func nothingIsDecidedBeforeAWindowOfAnswers() {
        var limit = Limit(configuration: .init(minimum: 16, maximum: 100))
        limit.record(.milliseconds(10), now: t0)
        for _ in 0..<98 { limit.record(.seconds(1), now: t0) }
        #expect(limit.limit == 100, "99 answers of a 100 window")
        limit.record(.seconds(1), now: t0)
        #expect(limit.limit == 50)
    }
}
