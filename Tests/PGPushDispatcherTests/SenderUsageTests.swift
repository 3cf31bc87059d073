import Testing
@testable import PGPushDispatcher

@Suite struct SenderUsageTests {
    @Test func aSenderInUseIsNeverIdleAndAnUnusedOneIsAfterTheTimeout() {
        let start = ContinuousClock.now
        let usage = SenderUsage(now: start)
        #expect(!usage.isIdle(for: .seconds(10), now: start + .seconds(9)))
        #expect(usage.isIdle(for: .seconds(10), now: start + .seconds(10)))

        usage.checkOut()
        usage.checkOut()
        #expect(!usage.isIdle(for: .seconds(10), now: start + .seconds(3600)), "checked out: in use however long")
        usage.checkIn(now: start + .seconds(100))
        #expect(!usage.isIdle(for: .seconds(10), now: start + .seconds(3600)), "one user still holds it")
        usage.checkIn(now: start + .seconds(200))
        #expect(!usage.isIdle(for: .seconds(10), now: start + .seconds(205)), "idle counts from the last check-in")
        #expect(usage.isIdle(for: .seconds(10), now: start + .seconds(210)))
    }
}
