import PGPushCore
import Testing

@testable import PGPushDispatcher

/// The scheduling decisions alone: no PostgreSQL, no network, no clock.
@Suite struct WorkSchedulerTests {
    typealias Scheduler = WorkScheduler<String>

    static func scheduler(capacity: Int = 4000, threshold: Int? = 500) -> Scheduler {
        Scheduler(configuration: .init(capacity: capacity, claimThreshold: threshold, maximumChunksPerClaim: 1000))
    }

    @Test func anIdleWorkerClaimsItsWholeCapacityInNotifications() throws {
        var scheduler = Self.scheduler()
        let budgetResult = scheduler.nextClaim(throttles: [:])
        let budget = try #require(budgetResult)
        #expect(budget.room == 4000)
        #expect(budget.maximumChunks == 1000, "a claim of one-token jobs is capped in chunks too")
        #expect(budget.appAllowances.isEmpty)
    }

    @Test func oneClaimRunsAtATime() throws {
        var scheduler = Self.scheduler()
        let first = scheduler.nextClaim(throttles: [:])
        #expect(first != nil)
        let result1 = scheduler.nextClaim(throttles: [:])
        #expect(result1 == nil)
        scheduler.claimFailed()
        let result2 = scheduler.nextClaim(throttles: [:])
        #expect(result2 != nil)
    }

    @Test func aThousandOneTokenJobsFillTheSameRoomAsOneThousandTokenChunk() throws {
        var small = Self.scheduler(capacity: 2000)
        var large = Self.scheduler(capacity: 2000)
        let smallBudgetResult = small.nextClaim(throttles: [:])
        let smallBudget = try #require(smallBudgetResult)
        let largeBudgetResult = large.nextClaim(throttles: [:])
        let largeBudget = try #require(largeBudgetResult)
        _ = small.claimSucceeded(Array(repeating: ("app", 1), count: 1000), budget: smallBudget)
        _ = large.claimSucceeded([("app", 1000)], budget: largeBudget)
        #expect(small.held == large.held)
        #expect(small.room == 1000 && large.room == 1000)
    }

    @Test func aFullClaimAsksToLookAgainAndAPartialOneDoesNot() throws {
        var scheduler = Self.scheduler(capacity: 4000)
        let firstResult = scheduler.nextClaim(throttles: [:])
        let first = try #require(firstResult)
        let full = scheduler.claimSucceeded(Array(repeating: ("app", 1), count: 1000), budget: first)
        #expect(full, "1,000 chunks hit the chunk cap")
        let secondResult = scheduler.nextClaim(throttles: [:])
        let second = try #require(secondResult)
        #expect(second.room == 3000)
        let again = scheduler.claimSucceeded([("app", 10)], budget: second)
        #expect(!again, "the queue ran dry")
    }

    @Test func whileWorkIsHeldAClaimWaitsForTheThreshold() throws {
        var scheduler = Self.scheduler(capacity: 4000, threshold: 500)
        let budgetResult = scheduler.nextClaim(throttles: [:])
        let budget = try #require(budgetResult)
        _ = scheduler.claimSucceeded([("app", 1000), ("app", 1000), ("app", 1000), ("app", 1000)], budget: budget)
        #expect(scheduler.room == 0)
        let result3 = scheduler.nextClaim(throttles: [:])
        #expect(result3 == nil)
        // Answers free room one by one; the claim loop is woken exactly when the threshold is crossed.
        var wakes = 0
        for _ in 0..<499 where scheduler.finished(app: "app", tokens: 1) { wakes += 1 }
        #expect(wakes == 0)
        let result4 = scheduler.nextClaim(throttles: [:])
        #expect(result4 == nil)
        let result5 = scheduler.finished(app: "app", tokens: 1)
        #expect(result5)
        let nextResult = scheduler.nextClaim(throttles: [:])
        let next = try #require(nextResult)
        #expect(next.room == 500)
    }

    @Test func anOvershootingChunkDoesNotMakeRoomNegativeForever() throws {
        var scheduler = Self.scheduler(capacity: 100, threshold: 10)
        let budgetResult = scheduler.nextClaim(throttles: [:])
        let budget = try #require(budgetResult)
        _ = scheduler.claimSucceeded([("app", 1000)], budget: budget)
        #expect(scheduler.room < 0)
        _ = scheduler.finished(app: "app", tokens: 1000)
        #expect(scheduler.held == 0)
        let result6 = scheduler.nextClaim(throttles: [:])
        #expect(result6?.room == 100)
    }

    @Test func aRateLimitedAppIsClaimedOnlyAFewSecondsAhead() throws {
        var scheduler = Self.scheduler(capacity: 4000)
        let throttles = ["slow": AppThrottle(ratePerSecond: 200)]
        let budgetResult = scheduler.nextClaim(throttles: throttles)
        let budget = try #require(budgetResult)
        // Two seconds at 200/s; nothing held yet.
        #expect(budget.appAllowances == ["slow": 400])
        _ = scheduler.claimSucceeded([("slow", 1000)], budget: budget)
        let nextResult = scheduler.nextClaim(throttles: throttles)
        let next = try #require(nextResult)
        #expect(next.appAllowances["slow"] == 0, "a chunk of five seconds is held: claim none of it now")
        #expect(next.room == 3000, "the rest of the room stays free for other apps")
    }

    @Test func anAppThatHoldsNothingMayAlwaysTakeOneChunk() {
        let scheduler = Self.scheduler()
        #expect(scheduler.allowance("trickle", AppThrottle(ratePerSecond: 0.1)) == 1)
    }

    @Test func anAppBackingOffIsClaimedByItsConcurrency() throws {
        var scheduler = Self.scheduler()
        let claim = scheduler.nextClaim(throttles: ["busy": AppThrottle(backoffConcurrency: 8)])
        let budget = try #require(claim)
        #expect(budget.appAllowances == ["busy": 16])
    }

    @Test func writesAreGroupedAndTheNextStartsWhenThePreviousReturns() throws {
        var scheduler = Self.scheduler()
        let firstResult = scheduler.completed("a", tokens: 1)
        let first = try #require(firstResult)
        #expect(first == ["a"], "an idle writer writes at once: no timer")
        let result7 = scheduler.completed("b", tokens: 1)
        #expect(result7 == nil)
        let result8 = scheduler.completed("c", tokens: 1)
        #expect(result8 == nil)
        #expect(scheduler.unwrittenCount == 3)
        let result9 = scheduler.writeSucceeded()
        #expect(result9 == ["b", "c"], "what arrived during a write is the next write")
        let result10 = scheduler.writeSucceeded()
        #expect(result10 == nil)
        #expect(scheduler.isIdle)
    }

    @Test func aFailedWriteKeepsItsResultsFirstAndStopsClaiming() throws {
        var scheduler = Self.scheduler()
        _ = scheduler.completed("a", tokens: 10)
        _ = scheduler.completed("b", tokens: 10)
        scheduler.writeFailed()
        #expect(scheduler.writesFailing)
        let result11 = scheduler.nextClaim(throttles: [:])
        #expect(result11 == nil, "nothing new is claimed while results cannot be written")
        let result12 = scheduler.completed("c", tokens: 1)
        #expect(result12 == nil, "the writer retries on its own backoff")
        let result13 = scheduler.nextWrite()
        #expect(result13 == ["a", "b", "c"])
        let result14 = scheduler.writeSucceeded()
        #expect(result14 == nil)
        #expect(!scheduler.writesFailing)
        let result15 = scheduler.nextClaim(throttles: [:])
        #expect(result15 != nil)
    }

    @Test func unwrittenResultsBeyondOneCapacityShrinkTheRoom() {
        var scheduler = Self.scheduler(capacity: 1000)
        _ = scheduler.completed("a", tokens: 1500)
        #expect(scheduler.room == 500)
    }

    @Test func drainingClaimsNothingAndAbandoningCountsWhatIsDropped() {
        var scheduler = Self.scheduler()
        _ = scheduler.completed("a", tokens: 7)
        scheduler.startDraining()
        let result16 = scheduler.nextClaim(throttles: [:])
        #expect(result16 == nil)
        let dropped = scheduler.abandonUnwritten()
        #expect(dropped.completions == 1 && dropped.tokens == 7)
        #expect(scheduler.isIdle)
    }

    @Test func aWriteStaysShortInRecordsButTakesAtLeastOneCompletion() {
        var scheduler = Scheduler(configuration: .init(capacity: 4000, maximumWriteRecords: 2500))
        let first = scheduler.completed("a", tokens: 1000)
        #expect(first == ["a"])
        _ = scheduler.completed("b", tokens: 1000)
        _ = scheduler.completed("c", tokens: 1000)
        _ = scheduler.completed("d", tokens: 1000)
        let second = scheduler.writeSucceeded()
        #expect(second == ["b", "c"], "2,000 records fit, a third thousand would not")
        let third = scheduler.writeSucceeded()
        #expect(third == ["d"])
        var huge = Scheduler(configuration: .init(capacity: 4000, maximumWriteRecords: 10))
        let whole = huge.completed("big", tokens: 500)
        #expect(whole == ["big"])
    }

    @Test func smallWorkIsClaimedFromTheFastLaneHoweverFarABroadcastOvershotTheRoom() throws {
        var scheduler = Self.scheduler(capacity: 2000, threshold: 250)
        _ = scheduler.nextClaim(throttles: [:])
        // A broadcast's chunks overshoot the room: nothing ordinary may be claimed until answers free the threshold.
        _ = scheduler.claimSucceeded([("app", 1000), ("app", 1000), ("app", 1000)], budget: ClaimBudget(room: 2000, maximumChunks: 1000))
        #expect(scheduler.room == -1000)
        let held = scheduler.nextClaim(throttles: [:], smallWorkWaiting: false)
        #expect(held == nil)

        // A just-expanded one-user job goes at once, from the lane the broadcast cannot take.
        let fastLaneResult = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        let fastLane = try #require(fastLaneResult)
        #expect(fastLane.room == 250, "the whole lane, whatever the broadcast holds")
        #expect(fastLane.maximumChunkTokens == 250, "small chunks only: never a broadcast's 1,000-token chunk")
        let full = scheduler.claimSucceeded(Array(repeating: ("app", 1), count: 250), budget: fastLane)
        #expect(full)
        #expect(scheduler.heldSmall == 250)
        #expect(scheduler.nextClaim(throttles: [:], smallWorkWaiting: true) == nil, "the lane is full")

        // Broadcast answers free nothing in the lane; small answers do, and say so, so the claim loop wakes.
        let broadcastAnswers = scheduler.finished(app: "app", tokens: 500)
        #expect(broadcastAnswers == false)
        #expect(scheduler.nextClaim(throttles: [:], smallWorkWaiting: true) == nil)
        let reopenedLane = scheduler.finished(app: "app", tokens: 1, small: true)
        #expect(reopenedLane, "the full lane reopened")
        let reopenedResult = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        let reopened = try #require(reopenedResult)
        #expect(reopened.room == 1)
        _ = scheduler.claimSucceeded([("app", 1)], budget: reopened)

        // With room to spare, a claim is an ordinary one, for chunks of any size.
        _ = scheduler.finished(app: "app", tokens: 2500)
        _ = scheduler.finished(app: "app", tokens: 250, small: true)
        #expect(scheduler.held == 0 && scheduler.heldSmall == 0)
        let normalResult = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        let normal = try #require(normalResult)
        #expect(normal.maximumChunkTokens == nil)
        #expect(normal.room == 2000)
    }

    @Test func aWriteBacklogBeyondTwiceTheCapacityClosesTheFastLane() throws {
        var scheduler = Self.scheduler(capacity: 2000, threshold: 250)
        _ = scheduler.nextClaim(throttles: [:])
        _ = scheduler.claimSucceeded([("app", 1000), ("app", 1000)], budget: ClaimBudget(room: 2000, maximumChunks: 1000))
        // A write is running and answers pile up behind it.
        _ = scheduler.completed("first", tokens: 1)
        _ = scheduler.completed("backlog", tokens: 3999)
        #expect(scheduler.room < 0)
        let within = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        #expect(within?.room == 250, "4,000 unwritten records are within the bound of twice the capacity")
        scheduler.claimFailed()
        _ = scheduler.completed("more", tokens: 1)
        #expect(scheduler.nextClaim(throttles: [:], smallWorkWaiting: true) == nil, "memory stays bounded")
        _ = scheduler.writeSucceeded()
        _ = scheduler.writeSucceeded()
        let open = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        #expect(open != nil, "the lane opens again once the backlog is written")
    }

    @Test func theFastLaneStillRespectsShutdownFailingWritesAndOneClaimAtATime() throws {
        var scheduler = Self.scheduler(capacity: 2000, threshold: 250)
        _ = scheduler.nextClaim(throttles: [:])
        _ = scheduler.claimSucceeded([("app", 1900)], budget: ClaimBudget(room: 2000, maximumChunks: 1000))
        let first = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        #expect(first != nil)
        let second = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        #expect(second == nil, "one claim at a time")
        scheduler.claimFailed()
        _ = scheduler.completed("chunk", tokens: 1)
        _ = scheduler.nextWrite()
        scheduler.writeFailed()
        let whileFailing = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        #expect(whileFailing == nil)
        _ = scheduler.writeSucceeded()
        scheduler.startDraining()
        let whileDraining = scheduler.nextClaim(throttles: [:], smallWorkWaiting: true)
        #expect(whileDraining == nil)
    }
}
