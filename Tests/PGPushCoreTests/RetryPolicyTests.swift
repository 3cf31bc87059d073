import Foundation
import Testing
import PGPushCore

private func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

@Suite struct RetryPolicyTests {
    let policy = RetryPolicy()
    let now = Date(timeIntervalSince1970: 1_700_000_000)

    @Test func capsDoubleAndStopAtMaximum() {
        #expect(policy.delayCap(beforeAttempt: 1) == .zero)
        #expect(policy.delayCap(beforeAttempt: 2) == .seconds(5))
        #expect(policy.delayCap(beforeAttempt: 3) == .seconds(10))
        #expect(policy.delayCap(beforeAttempt: 8) == .seconds(320))
        #expect(policy.delayCap(beforeAttempt: 9) == .seconds(600))
        #expect(policy.delayCap(beforeAttempt: 1000) == .seconds(600))
        let worstCase = (2...policy.maxAttempts).map { seconds(policy.delayCap(beforeAttempt: $0)) }.reduce(0, +)
        #expect(worstCase < 3600, "all attempts fit within an hour")
    }

    @Test func fullJitterStaysWithinBoundsAndSpreads() {
        var rng = SplitMix64(seed: 42)
        for attempt in 2...12 {
            let cap = policy.delayCap(beforeAttempt: attempt)
            var total = 0.0
            let samples = 2000
            for _ in 0..<samples {
                let delay = policy.delay(beforeAttempt: attempt, using: &rng)
                #expect(delay >= .zero && delay <= cap)
                total += seconds(delay)
            }
            let meanFraction = total / Double(samples) / seconds(cap)
            #expect(meanFraction > 0.4 && meanFraction < 0.6, "attempt \(attempt): mean \(meanFraction) of cap")
        }
        #expect(policy.delay(beforeAttempt: 1, using: &rng) == .zero)
    }

    @Test func seededGeneratorIsReproducible() {
        var a = SplitMix64(seed: 7)
        var b = SplitMix64(seed: 7)
        var c = SplitMix64(seed: 8)
        let first = (0..<5).map { _ in a.next() }
        #expect(first == (0..<5).map { _ in b.next() })
        #expect(first != (0..<5).map { _ in c.next() })
    }

    @Test func givesUpAtMaxAttempts() {
        var rng = SplitMix64(seed: 1)
        #expect(policy.decide(failedAttempt: 8, now: now, expiresAt: nil, rng: &rng) == .giveUp(.attemptsExhausted))
        #expect(policy.decide(failedAttempt: 9, now: now, expiresAt: nil, rng: &rng) == .giveUp(.attemptsExhausted))
        guard case .retry(let at) = policy.decide(failedAttempt: 7, now: now, expiresAt: nil, rng: &rng) else {
            Issue.record("attempt 7 should be retried")
            return
        }
        #expect(at >= now && at <= now.addingTimeInterval(320))
    }

    @Test func givesUpWhenExpiryWouldPass() {
        var rng = SplitMix64(seed: 3)
        for attempt in 1..<8 {
            #expect(policy.decide(failedAttempt: attempt, now: now, expiresAt: now, rng: &rng) == .giveUp(.wouldExceedExpiry))
            let roomy = now.addingTimeInterval(601)
            guard case .retry(let at) = policy.decide(failedAttempt: attempt, now: now, expiresAt: roomy, rng: &rng) else {
                Issue.record("attempt \(attempt) with a far expiry should be retried")
                continue
            }
            #expect(at < roomy)
            #expect(at <= now.addingTimeInterval(seconds(policy.delayCap(beforeAttempt: attempt + 1))))
        }
    }

    @Test func expiryBetweenNowAndCapDependsOnTheDraw() {
        // With a 10-second window and expiry 5 s ahead, some draws land before and some after.
        var rng = SplitMix64(seed: 11)
        var outcomes = Set<String>()
        for _ in 0..<200 {
            switch policy.decide(failedAttempt: 2, now: now, expiresAt: now.addingTimeInterval(5), rng: &rng) {
            case .retry(let at):
                #expect(at < now.addingTimeInterval(5))
                outcomes.insert("retry")
            case .giveUp(let reason):
                #expect(reason == .wouldExceedExpiry)
                outcomes.insert("giveUp")
            }
        }
        #expect(outcomes == ["retry", "giveUp"])
    }
}
