import Testing
import PGPushCore

@Suite struct TokenBucketTests {
    let t0 = ContinuousClock.now

    /// Sends as fast as the bucket allows for `span` of simulated time and counts the sends.
    private func simulate(_ bucket: inout TokenBucket, from start: ContinuousClock.Instant, span: Duration) -> Int {
        var now = start
        var sent = 0
        while now < start + span && sent < 1_000_000 {
            if let wait = bucket.take(1, now: now) { now += wait }
            if now < start + span { sent += 1 }
        }
        return sent
    }

    @Test func burstThenSteadyRate() {
        var bucket = TokenBucket(ratePerSecond: 100, burst: 10)
        for _ in 0..<10 {
            let wait = bucket.take(1, now: t0)
            #expect(wait == nil)
        }
        let wait = bucket.take(1, now: t0)
        #expect(wait == .milliseconds(10))
        // The reservation is held: another caller queues behind it.
        let next = bucket.take(1, now: t0)
        #expect(next == .milliseconds(20))
    }

    @Test func throughputMatchesRate() {
        var bucket = TokenBucket(ratePerSecond: 250, burst: 20)
        let sent = simulate(&bucket, from: t0, span: .seconds(10))
        #expect(abs(sent - (20 + 2500)) <= 2, "sent \(sent)")
    }

    @Test func refillsWhileIdleUpToBurst() {
        var bucket = TokenBucket(ratePerSecond: 10, burst: 5)
        _ = bucket.take(5, now: t0)
        #expect(abs(bucket.available(now: t0 + .milliseconds(200)) - 2) < 1e-9)
        #expect(bucket.available(now: t0 + .seconds(60)) == 5)
        // Time that goes backwards adds nothing.
        let wait = bucket.take(1, now: t0 - .seconds(5))
        #expect(wait != nil)
    }

    @Test func batchTake() {
        var bucket = TokenBucket(ratePerSecond: 1000, burst: 100)
        let first = bucket.take(100, now: t0)
        let second = bucket.take(50, now: t0)
        #expect(first == nil)
        #expect(second == .milliseconds(50))
    }

    @Test func setRateChangesThroughput() {
        var bucket = TokenBucket(ratePerSecond: 100, burst: 1)
        _ = simulate(&bucket, from: t0, span: .seconds(1))
        bucket.setRate(10)
        let sent = simulate(&bucket, from: t0 + .seconds(2), span: .seconds(10))
        #expect(abs(sent - 100) <= 2, "sent \(sent)")
        bucket.setRate(0)
        #expect(bucket.ratePerSecond == TokenBucket.minimumRate)
        let huge = bucket.take(Int.max / 2, now: t0 + .seconds(20))
        #expect(huge == .seconds(365 * 24 * 3600))
    }

    @Test func infiniteRateNeverWaits() {
        var bucket = TokenBucket(ratePerSecond: .infinity, burst: 1)
        for _ in 0..<1000 {
            let wait = bucket.take(5, now: t0)
            #expect(wait == nil)
        }
    }
}

@Suite struct AdaptiveConcurrencyTests {
    let t0 = ContinuousClock.now

    @Test func multiplicativeDecreaseOncePerCoolDown() {
        var limiter = AdaptiveConcurrency(initial: 100, minimum: 4, maximum: 200, coolDown: .seconds(1))
        #expect(limiter.limit == 100)
        let firstDecreased = limiter.recordOverload(now: t0)
        #expect(firstDecreased)
        #expect(limiter.limit == 50)
        // A burst of 429s from many in-flight streams is one event.
        for i in 1...100 {
            let decreased = limiter.recordOverload(now: t0 + .milliseconds(i * 9))
            #expect(!decreased)
        }
        #expect(limiter.limit == 50)
        let afterCoolDown = limiter.recordOverload(now: t0 + .seconds(1))
        #expect(afterCoolDown)
        #expect(limiter.limit == 25)
        for i in 2...20 { limiter.recordOverload(now: t0 + .seconds(i)) }
        #expect(limiter.limit == 4, "never below the minimum")
    }

    @Test func additiveIncreaseIsSlowAndCapped() {
        var limiter = AdaptiveConcurrency(initial: 50, minimum: 1, maximum: 60)
        for _ in 0..<49 { limiter.recordSuccess() }
        #expect(limiter.limit == 50, "less than a window of successes does not grow the limit")
        for _ in 0..<2 { limiter.recordSuccess() }
        #expect(limiter.limit == 51)
        for _ in 0..<100_000 { limiter.recordSuccess() }
        #expect(limiter.limit == 60)
    }

    @Test func toleratedShareOfOverloadsPerWindowIsNoCut() {
        var limiter = AdaptiveConcurrency(initial: 100, minimum: 4, maximum: 100, toleratedOverloadShare: 0.05)
        // Each window of 100 answers holds 5 overloads: within the share, window after window.
        for window in 0..<20 {
            for index in 0..<100 {
                let now = t0 + .seconds(window) + .milliseconds(index)
                if index % 20 == 3 {
                    let decreased = limiter.recordOverload(now: now)
                    #expect(!decreased)
                } else {
                    limiter.recordSuccess()
                }
            }
        }
        #expect(limiter.limit == 100)
        // The sixth overload of one window is past the share: the limit halves, as without a tolerance.
        for index in 0..<5 { limiter.recordOverload(now: t0 + .seconds(30) + .milliseconds(index)) }
        #expect(limiter.limit == 100)
        let decreased = limiter.recordOverload(now: t0 + .seconds(30) + .milliseconds(5))
        #expect(decreased)
        #expect(limiter.limit == 50)
    }

    @Test func withoutToleranceTheFirstOverloadCuts() {
        var limiter = AdaptiveConcurrency(initial: 100, minimum: 4, maximum: 100)
        for _ in 0..<99 { limiter.recordSuccess() }
        let decreased = limiter.recordOverload(now: t0)
        #expect(decreased)
        #expect(limiter.limit == 50)
    }

    @Test func initialIsClampedAndDefaultsToMaximum() {
        #expect(AdaptiveConcurrency(initial: 5000, minimum: 1, maximum: 100).limit == 100)
        #expect(AdaptiveConcurrency(initial: 0, minimum: 3, maximum: 100).limit == 3)
        #expect(AdaptiveConcurrency(minimum: 1, maximum: 8).limit == 8)
    }
}

struct SlowStartTests {
    @Test func slowStartDoublesPerWindowUntilTheFirstOverload() {
        var limiter = AdaptiveConcurrency(initial: 8, minimum: 4, maximum: 1000, slowStart: true)
        for _ in 0..<8 { limiter.recordSuccess() }
        #expect(limiter.limit == 16)
        for _ in 0..<16 { limiter.recordSuccess() }
        #expect(limiter.limit == 32)
        let decreased = limiter.recordOverload(now: .now)
        #expect(decreased)
        #expect(limiter.limit == 16)
        // After an overload, growth is additive again: a full window of successes adds about one.
        for _ in 0..<16 { limiter.recordSuccess() }
        #expect(limiter.limit == 16 || limiter.limit == 17)
    }

    @Test func withoutSuccessesTheLimitNeverGrows() {
        let limiter = AdaptiveConcurrency(initial: 8, minimum: 4, maximum: 1000, slowStart: true)
        #expect(limiter.limit == 8)
    }
}
