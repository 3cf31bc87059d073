import PGPushCore
import Testing

@testable import PGPushDispatcher

/// The worker's decisions beyond claim sizing: the fast lane's signal, the cadence of expansion, group
/// commit's actions and the shutdown's grace period. Pure: instants are values, nothing sleeps.
@Suite struct WorkerStateMachineTests {
    typealias Machine = WorkerStateMachine<String>
    static let start = ContinuousClock.now

    static func machine(capacity: Int = 4000, threshold: Int = 500, grace: Duration = .seconds(30)) -> Machine {
        Machine(configuration: .init(
            scheduler: .init(capacity: capacity, claimThreshold: threshold, maximumChunksPerClaim: 1000),
            expansionGathering: .milliseconds(10), largeJobLookInterval: .milliseconds(100), gracePeriod: grace))
    }

    static func budget(_ action: Machine.Action) -> ClaimBudget? {
        if case .claim(let budget) = action { return budget }
        return nil
    }

    static func batch(_ actions: [Machine.Action]) -> [String]? {
        for case .write(let batch) in actions { return batch }
        return nil
    }

    static func wakesClaimer(_ actions: [Machine.Action]) -> Bool {
        actions.contains { if case .wakeClaimer = $0 { true } else { false } }
    }

    /// Fills the room with one broadcast's chunks: a full claim, so the claimer looks again at once.
    static func fillWithBroadcast(_ machine: inout Machine) throws {
        let first = machine.nextClaim(throttles: [:])
        let claimed = try #require(budget(first))
        let result1 = machine.claimSucceeded(Array(repeating: ("big", 1000), count: 4), budget: claimed)
        #expect(wakesClaimer([result1]))
    }

    @Test func smallJobsJustExpandedOpenTheFastLaneWhileABroadcastHoldsTheRoom() throws {
        var machine = Self.machine()
        try Self.fillWithBroadcast(&machine)
        let result2 = machine.nextClaim(throttles: [:])
        #expect(Self.budget(result2) == nil, "no room and nothing small waiting")
        let result3 = machine.smallJobsExpanded(3)
        #expect(Self.wakesClaimer([result3]), "new small work wakes the claimer")
        let claimAction1 = machine.nextClaim(throttles: [:])

        let lane = try #require(Self.budget(claimAction1))
        #expect(lane.maximumChunkTokens != nil, "the lane claims small chunks only")
        // A claim that comes back not full took every small chunk there was: the lane waits for the next expansion.
        let result4 = machine.claimSucceeded([("app", 1), ("app", 1), ("app", 1)], budget: lane)
        #expect(result4.isNone)
        let result5 = machine.nextClaim(throttles: [:])
        #expect(Self.budget(result5) == nil)
        _ = machine.smallJobsExpanded(1)
        let result6 = machine.nextClaim(throttles: [:])
        #expect(Self.budget(result6) != nil)
    }

    @Test func smallJobsExpandedDuringAClaimStillCountAsWaitingAfterIt() throws {
        var machine = Self.machine()
        try Self.fillWithBroadcast(&machine)
        _ = machine.smallJobsExpanded(1)
        let claimAction2 = machine.nextClaim(throttles: [:])

        let lane = try #require(Self.budget(claimAction2))
        _ = machine.smallJobsExpanded(1)  // while the claim runs
        _ = machine.claimSucceeded([("app", 1)], budget: lane)
        let result7 = machine.nextClaim(throttles: [:])
        #expect(Self.budget(result7) != nil, "the second expansion was not served by the first claim")
    }

    @Test func theExpansionClaimsFromTheFastLaneAndItsChunksAreHeld() throws {
        var machine = Self.machine()
        try Self.fillWithBroadcast(&machine)
        let laneBudget = machine.expansionClaim(throttles: [:])
        let lane = try #require(laneBudget, "small work is about to be made: the lane is open")
        #expect(lane.maximumChunkTokens != nil)
        // Everything it made was claimed: it wakes the claimer to start the chunks, and no small work waits.
        let expanded = machine.smallJobsExpanded(2, claimed: [("app", 1), ("app", 1)], budget: lane, unclaimedChunks: 0)
        #expect(Self.wakesClaimer([expanded]))
        #expect(machine.held == 4002)
        let afterAllClaimed = machine.nextClaim(throttles: [:])
        #expect(Self.budget(afterAllClaimed) == nil, "nothing small was left for a claim")
        // Chunks it left (a higher priority waits) open the lane for the claim service.
        let secondBudget = machine.expansionClaim(throttles: [:])
        let second = try #require(secondBudget)
        _ = machine.smallJobsExpanded(1, claimed: [], budget: second, unclaimedChunks: 1)
        let afterSomeLeft = machine.nextClaim(throttles: [:])
        #expect(Self.budget(afterSomeLeft) != nil)
    }

    @Test func aClaimTurnedAwayWhileTheExpansionClaimsIsWokenAfterIt() throws {
        var machine = Self.machine()
        let expansionBudget = machine.expansionClaim(throttles: [:])
        let budget = try #require(expansionBudget)
        let turnedAway = machine.nextClaim(throttles: [:])
        #expect(Self.budget(turnedAway) == nil, "one claim at a time")
        let expanded = machine.smallJobsExpanded(0, claimed: [], budget: budget, unclaimedChunks: 0)
        #expect(Self.wakesClaimer([expanded]), "the claim service asked meanwhile and must look again")
        let again = machine.nextClaim(throttles: [:])
        #expect(Self.budget(again) != nil)

        // The same when the expansion's statement fails.
        var failing = Self.machine()
        let failingBudget = failing.expansionClaim(throttles: [:])
        #expect(failingBudget != nil)
        _ = failing.nextClaim(throttles: [:])
        let failed = failing.expansionClaimFailed()
        #expect(Self.wakesClaimer([failed]))
        let afterFailure = failing.nextClaim(throttles: [:])
        #expect(Self.budget(afterFailure) != nil)

        // Nobody asked: an empty pass wakes nobody.
        var quiet = Self.machine()
        let aloneBudget = quiet.expansionClaim(throttles: [:])
        let alone = try #require(aloneBudget)
        let emptyPass = quiet.smallJobsExpanded(0, claimed: [], budget: alone, unclaimedChunks: 0)
        #expect(emptyPass.isNone)
    }

    @Test func withoutRoomSmallJobsWaitAndTheNextClaimTurnWithRoomGoesToTheExpansion() throws {
        var machine = Self.machine(capacity: 4000, threshold: 500)
        try Self.fillWithBroadcast(&machine)
        // The lane takes small work while the broadcast holds the room, until it is full too.
        let laneBudget = machine.expansionClaim(throttles: [:])
        let lane = try #require(laneBudget)
        _ = machine.smallJobsExpanded(500, claimed: Array(repeating: ("app", 1), count: 500), budget: lane, unclaimedChunks: 0)
        let noRoom = machine.expansionClaim(throttles: [:])
        #expect(noRoom == nil, "no room and the lane is full: the small jobs stay queued")
        // Answers free the room: the claimer wakes, and gives its turn to the expansion.
        let freed = machine.tokensFinished(app: "big", tokens: 2000, small: false)
        #expect(Self.wakesClaimer([freed]))
        let turn = machine.nextClaim(throttles: [:])
        #expect(turn.isWakeExpander)
        let budgetNow = machine.expansionClaim(throttles: [:])
        let budget = try #require(budgetNow)
        #expect(budget.room == 1500, "4,000 less the broadcast's 2,000 and the lane's 500")
        let expanded = machine.smallJobsExpanded(3, claimed: [("app", 1), ("app", 1), ("app", 1)], budget: budget, unclaimedChunks: 0)
        #expect(Self.wakesClaimer([expanded]), "the claimer gave its turn away and looks again")
        let claim = machine.nextClaim(throttles: [:])
        #expect(Self.budget(claim) != nil)
    }

    @Test func aClaimTurnGoesToTheExpansionOnlyWhileItIsIdle() throws {
        var machine = Self.machine(capacity: 4000, threshold: 500)
        try Self.fillWithBroadcast(&machine)
        let laneBudget = machine.expansionClaim(throttles: [:])
        _ = machine.smallJobsExpanded(500, claimed: Array(repeating: ("app", 1), count: 500),
                                      budget: try #require(laneBudget), unclaimedChunks: 0)
        let deferred = machine.expansionClaim(throttles: [:])
        #expect(deferred == nil && !machine.claimIsRunning, "no room and no lane: the small jobs stay queued")
        _ = machine.tokensFinished(app: "big", tokens: 2000, small: false)

        // The expansion service is handling a wake (here: gathering): the claimer claims itself.
        _ = machine.expansionWoken(at: Self.start)
        let whileBusy = machine.nextClaim(throttles: [:])
        let busyBudget = try #require(Self.budget(whileBusy), "a turn given to a busy expansion could wait")
        _ = machine.claimSucceeded([], budget: busyBudget)
        machine.expansionIdle()

        // Idle: the turn goes to it, and a pass that found nothing still hands the turn back.
        let given = machine.nextClaim(throttles: [:])
        #expect(given.isWakeExpander)
        let budgetNow = machine.expansionClaim(throttles: [:])
        let emptyPass = machine.smallJobsExpanded(0, claimed: [], budget: try #require(budgetNow), unclaimedChunks: 0)
        #expect(Self.wakesClaimer([emptyPass]), "the claimer gave its turn away and must look again")
        let back = machine.nextClaim(throttles: [:])
        #expect(Self.budget(back) != nil)
    }

    @Test func whileAClaimRunsSmallJobsAreExpandedWithoutClaiming() throws {
        var machine = Self.machine()
        let running = machine.nextClaim(throttles: [:])
        let budget = try #require(Self.budget(running))
        let during = machine.expansionClaim(throttles: [:])
        #expect(during == nil)
        #expect(machine.claimIsRunning, "the running claim takes their chunks in priority order")
        let expanded = machine.smallJobsExpanded(3)
        #expect(Self.wakesClaimer([expanded]))
        // Nothing was left queued: the claim's end hands no turn to the expansion.
        let ended = machine.claimSucceeded([("app", 1)], budget: budget)
        #expect(ended.isNone)
        let next = machine.nextClaim(throttles: [:])
        #expect(Self.budget(next) != nil)
    }

    @Test func theExpansionDoesNotClaimWhileTheClaimServiceDoesOrDuringShutdown() throws {
        var machine = Self.machine()
        let claiming = machine.nextClaim(throttles: [:])
        #expect(Self.budget(claiming) != nil)
        let duringClaim = machine.expansionClaim(throttles: [:])
        #expect(duringClaim == nil)
        var stopping = Self.machine()
        _ = stopping.shutdownRequested(at: Self.start)
        let duringShutdown = stopping.expansionClaim(throttles: [:])
        #expect(duringShutdown == nil)
    }

    @Test func expansionPassesAreGatheredAndBroadcastsLookedForOnTheirInterval() {
        var machine = Self.machine()
        let t0 = Self.start
        let result8 = machine.expansionWoken(at: t0)
        #expect(result8.expansion == true, "the first pass looks for a broadcast too")
        let result9 = machine.expansionWoken(at: t0 + .milliseconds(4))
        #expect(result9.waitUntil == t0 + .milliseconds(10))
        let result10 = machine.expansionWoken(at: t0 + .milliseconds(10))
        #expect(result10.expansion == false, "small jobs only, within the look interval")
        let result11 = machine.expansionWoken(at: t0 + .milliseconds(100))
        #expect(result11.expansion == true)
        // One found: look again at once, and wake the claimer for its chunks.
        let found = machine.largeJobLooked(found: true)
        #expect(Self.wakesClaimer(found))
        #expect(found.contains { if case .wakeExpander = $0 { true } else { false } })
        let result12 = machine.expansionWoken(at: t0 + .milliseconds(110))
        #expect(result12.expansion == true)
        let result13 = machine.largeJobLooked(found: false)
        #expect(result13.isEmpty)
        let result14 = machine.expansionWoken(at: t0 + .milliseconds(120))
        #expect(result14.expansion == false)
    }

    @Test func fullSmallJobBatchesAreFollowedByAnotherUntilOneComesBackShort() {
        var machine = Self.machine()
        #expect(machine.hasMoreSmallJobs(1000, batch: 1000))
        #expect(!machine.hasMoreSmallJobs(999, batch: 1000))
        let result15 = machine.smallJobsExpanded(0)
        #expect(result15.isNone, "nothing expanded wakes nobody")
        _ = machine.shutdownRequested(at: Self.start)
        #expect(!machine.hasMoreSmallJobs(1000, batch: 1000), "a shutdown ends expanding")
        let result16 = machine.expansionWoken(at: Self.start + .seconds(1))
        #expect(result16.isNone)
    }

    @Test func completionsAreWrittenOneBatchAtATimeAndWrittenResultsWakeTheClaimer() {
        var machine = Self.machine()
        let result17 = machine.chunkCompleted("a", records: 1)
        #expect(Self.batch([result17]) == ["a"])
        let result18 = machine.chunkCompleted("b", records: 1)
        #expect(result18.isNone, "a write is running")
        let result19 = machine.chunkCompleted("c", records: 1)
        #expect(result19.isNone)
        let after = machine.writeSucceeded()
        #expect(Self.batch(after) == ["b", "c"])
        #expect(Self.wakesClaimer(after))
        let result20 = machine.writeSucceeded()
        #expect(Self.batch(result20) == nil)
    }

    @Test func aFailedWriteIsRetriedWholeAndClaimingWaitsForIt() {
        var machine = Self.machine()
        _ = machine.chunkCompleted("a", records: 1)
        let result21 = machine.writeFailed()
        #expect(result21.isNone)
        let result22 = machine.nextClaim(throttles: [:])
        #expect(Self.budget(result22) == nil, "no claims while writes fail")
        let result23 = machine.chunkCompleted("b", records: 1)
        #expect(result23.isNone, "a finishing chunk does not hurry the retry")
        let result24 = machine.retryWrite()
        #expect(Self.batch([result24]) == ["a", "b"])
        _ = machine.writeSucceeded()
        let result25 = machine.nextClaim(throttles: [:])
        #expect(Self.budget(result25) != nil)
    }

    @Test func shutdownStopsClaimingAndSetsTheGraceDeadline() throws {
        var machine = Self.machine(grace: .seconds(30))
        try Self.fillWithBroadcast(&machine)
        let t0 = Self.start
        let result26 = machine.shutdownRequested(at: t0)
        #expect(Self.wakesClaimer(result26), "the claimer wakes to see it")
        #expect(machine.isDraining)
        #expect(machine.graceDeadline == t0 + .seconds(30))
        let result27 = machine.shutdownRequested(at: t0 + .seconds(5))
        #expect(result27.isEmpty, "a second signal changes nothing")
        #expect(machine.graceDeadline == t0 + .seconds(30))
        _ = machine.tokensFinished(app: "big", tokens: 4000, small: false)
        let result28 = machine.nextClaim(throttles: [:])
        #expect(Self.budget(result28) == nil, "room alone does not claim while draining")
        #expect(!machine.graceIsOver(at: t0 + .seconds(29)))
        #expect(machine.graceIsOver(at: t0 + .seconds(30)))
    }

    @Test func resultsWrittenBeforeTheDeadlineSettleTheShutdown() {
        var machine = Self.machine()
        _ = machine.chunkCompleted("a", records: 1)
        _ = machine.shutdownRequested(at: Self.start)
        #expect(!machine.writesSettled, "a write is still running")
        _ = machine.writeSucceeded()
        #expect(machine.writesSettled)
        let result29 = machine.graceEnded()
        #expect(result29.isNone, "nothing to drop")
    }

    @Test func theGracePeriodEndingDropsWhatIsUnwrittenAndStopsRetries() {
        var machine = Self.machine()
        _ = machine.chunkCompleted("a", records: 7)
        _ = machine.writeFailed()
        _ = machine.chunkCompleted("b", records: 3)
        _ = machine.shutdownRequested(at: Self.start)
        guard case .abandonWrites(let completions, let tokens) = machine.graceEnded() else {
            Issue.record("the unwritten results are reported as dropped")
            return
        }
        #expect(completions == 2 && tokens == 10)
        #expect(machine.writesAbandoned && machine.writesSettled)
        let result30 = machine.retryWrite()
        #expect(result30.isNone, "a failing write is not retried after the grace period")
        #expect(machine.unwrittenCount == 0)
    }
}

extension WorkerStateMachine.Action {
    var isNone: Bool { if case .none = self { true } else { false } }
    var isWakeExpander: Bool { if case .wakeExpander = self { true } else { false } }
    /// For `.expand`: whether it looks for a broadcast; nil for any other action.
    var expansion: Bool? { if case .expand(let large) = self { large } else { nil } }
    var waitUntil: ContinuousClock.Instant? { if case .expandAt(let instant) = self { instant } else { nil } }
}
