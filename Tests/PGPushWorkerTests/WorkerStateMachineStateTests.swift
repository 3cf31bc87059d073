import PGPushCore
import Testing

@testable import PGPushDispatcher

/// The state the ``WorkerStateMachine`` keeps as enums (its phase with the claim turn, the expansion's
/// activity, the large-job search) and the actions that carry out the services' decisions: stop claiming, stop
/// sending, expand small jobs with or without a claim budget, expand again after a full batch. Pure.
@Suite struct WorkerStateMachineStateTests {
    typealias Machine = WorkerStateMachine<String>
    static let start = ContinuousClock.now

    static func machine(capacity: Int = 4000) -> Machine {
        Machine(configuration: .init(
            scheduler: .init(capacity: capacity, claimThreshold: 500, maximumChunksPerClaim: 1000),
            expansionGathering: .milliseconds(10), largeJobLookInterval: .milliseconds(100), gracePeriod: .seconds(30)))
    }

    /// The actions by name, so a test compares lists.
    static func names(_ actions: [Machine.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .claim: "claim"
            case .stopClaiming: "stopClaiming"
            case .write: "write"
            case .wakeClaimer: "wakeClaimer"
            case .expand(let large): large ? "expand+large" : "expand"
            case .expandSmallJobs(let budget): budget == nil ? "expandSmallJobs" : "expandSmallJobs+claim"
            case .wakeExpander: "wakeExpander"
            case .expandAt: "expandAt"
            case .stopSending: "stopSending"
            case .abandonWrites: "abandonWrites"
            case .none: "none"
            }
        }
    }

    static func name(_ action: Machine.Action) -> String { names([action])[0] }

    static func budget(_ action: Machine.Action) -> ClaimBudget? {
        switch action {
        case .claim(let budget): budget
        case .expandSmallJobs(let budget): budget
        default: nil
        }
    }

    /// The whole room taken by one broadcast's chunks.
    static func fill(_ machine: inout Machine) throws {
        let budget = try #require(Self.budget(machine.nextClaim(throttles: [:])))
        #expect(name(machine.claimSucceeded(Array(repeating: ("big", 1000), count: 4), budget: budget)) == "wakeClaimer")
    }

    @Test func aNewMachineRunsWithTheClaimTurnTheClaimersAndAnIdleExpansion() {
        let machine = Self.machine()
        #expect(machine.phase == .running(.claimer))
        #expect(machine.expansion == .idle)
        #expect(machine.largeJobSearch == .noneFound(lookedAt: nil))
    }

    @Test func theExpansionClaimingTurnsTheClaimerAwayAndWakesItWhenItsClaimEnds() throws {
        var machine = Self.machine()
        let turn = machine.smallJobTurn(throttles: [:])
        #expect(Self.name(turn) == "expandSmallJobs+claim")
        #expect(machine.phase == .running(.expansionClaiming(claimerWaiting: false)))
        #expect(Self.name(machine.nextClaim(throttles: [:])) == "none", "the budget is the expansion's")
        #expect(machine.phase == .running(.expansionClaiming(claimerWaiting: true)))
        let ended = machine.smallJobsExpanded(0, claimed: [], budget: try #require(Self.budget(turn)), unclaimedChunks: 0, batch: 100)
        #expect(Self.names(ended) == ["wakeClaimer"], "the claimer turned away is woken")
        #expect(machine.phase == .running(.claimer))
    }

    @Test func aFailedExpansionClaimGivesTheTurnBack() throws {
        var machine = Self.machine()
        _ = machine.smallJobTurn(throttles: [:])
        #expect(Self.name(machine.expansionClaimFailed()) == "none", "nobody was turned away")
        #expect(machine.phase == .running(.claimer))
    }

    @Test func whileTheClaimServiceClaimsTheExpansionOnlyMakesChunks() throws {
        var machine = Self.machine()
        let claim = machine.nextClaim(throttles: [:])
        #expect(Self.name(claim) == "claim")
        #expect(Self.name(machine.smallJobTurn(throttles: [:])) == "expandSmallJobs", "no budget: the running claim takes them")
        #expect(machine.phase == .running(.claimer))
    }

    @Test func smallJobsLeftQueuedForWantOfRoomGetTheNextClaimTurnOnceTheExpansionIsIdle() throws {
        var machine = Self.machine()
        try Self.fill(&machine)
        let lane = try #require(Self.budget(machine.smallJobTurn(throttles: [:])), "the fast lane's room")
        _ = machine.smallJobsExpanded(500, claimed: Array(repeating: ("app", 1), count: 500), budget: lane,
                                      unclaimedChunks: 0, batch: 1000)
        #expect(Self.name(machine.smallJobTurn(throttles: [:])) == "none", "no room and no lane: the small jobs stay queued")
        #expect(machine.phase == .running(.expansionDeferred(claimerWaiting: false)))
        _ = machine.tokensFinished(app: "big", tokens: 2000, small: false)

        _ = machine.expansionWoken(at: Self.start)
        #expect(machine.expansion == .handlingWake)
        let busy = try #require(Self.budget(machine.nextClaim(throttles: [:])), "a busy expansion is not given the turn")
        _ = machine.claimSucceeded([], budget: busy)
        machine.expansionIdle()
        #expect(machine.expansion == .idle)

        #expect(Self.name(machine.nextClaim(throttles: [:])) == "wakeExpander", "the turn goes to the queued small jobs")
        #expect(machine.phase == .running(.givenToExpansion))
        let turn = machine.smallJobTurn(throttles: [:])
        #expect(machine.phase == .running(.expansionClaiming(claimerWaiting: true)))
        let ended = machine.smallJobsExpanded(3, claimed: [("app", 1), ("app", 1), ("app", 1)], budget: try #require(Self.budget(turn)),
                                              unclaimedChunks: 0, batch: 1000)
        #expect(Self.names(ended) == ["wakeClaimer"])
        #expect(machine.phase == .running(.claimer))
    }

    @Test func aFullBatchOfSmallJobsWakesTheExpansionAgain() throws {
        var machine = Self.machine()
        let budget = try #require(Self.budget(machine.smallJobTurn(throttles: [:])))
        let full = machine.smallJobsExpanded(100, claimed: Array(repeating: ("app", 1), count: 100), budget: budget,
                                             unclaimedChunks: 0, batch: 100)
        #expect(Self.names(full) == ["wakeClaimer", "wakeExpander"])
    }

    @Test func theLargeJobSearchLooksAtOnceAfterAFindAndAfterItsIntervalOtherwise() {
        var machine = Self.machine()
        let t0 = Self.start
        #expect(Self.name(machine.expansionWoken(at: t0)) == "expand+large")
        #expect(machine.largeJobSearch == .noneFound(lookedAt: t0))
        #expect(Self.names(machine.largeJobLooked(found: true)) == ["wakeClaimer", "wakeExpander"])
        #expect(machine.largeJobSearch == .found(lookedAt: t0))
        #expect(Self.name(machine.expansionWoken(at: t0 + .milliseconds(10))) == "expand+large")
        _ = machine.largeJobLooked(found: false)
        #expect(machine.largeJobSearch == .noneFound(lookedAt: t0 + .milliseconds(10)))
        #expect(Self.name(machine.expansionWoken(at: t0 + .milliseconds(20))) == "expand")
        #expect(Self.name(machine.expansionWoken(at: t0 + .milliseconds(110))) == "expand+large")
    }

    @Test func shutdownStopsSendingAndClaimingAndWakesBothLoopsOnce() throws {
        var machine = Self.machine()
        try Self.fill(&machine)
        let t0 = Self.start
        #expect(Self.names(machine.shutdownRequested(at: t0)) == ["stopSending", "wakeClaimer", "wakeExpander"])
        #expect(machine.phase == .draining(deadline: t0 + .seconds(30)))
        #expect(machine.shutdownRequested(at: t0 + .seconds(1)).isEmpty)
        #expect(Self.name(machine.nextClaim(throttles: [:])) == "stopClaiming")
        #expect(Self.name(machine.claimFailed()) == "stopClaiming", "a claim cut short by the shutdown ends the loop")
        #expect(Self.name(machine.smallJobTurn(throttles: [:])) == "none")
        #expect(Self.name(machine.expansionWoken(at: t0 + .seconds(1))) == "none")
        #expect(machine.expansion == .idle)
    }

    @Test func anExpansionClaimEndingDuringTheShutdownLeavesTheMachineDraining() throws {
        var machine = Self.machine()
        let budget = try #require(Self.budget(machine.smallJobTurn(throttles: [:])))
        _ = machine.shutdownRequested(at: Self.start)
        _ = machine.smallJobsExpanded(1, claimed: [("app", 1)], budget: budget, unclaimedChunks: 0, batch: 100)
        #expect(machine.isDraining)
        #expect(machine.held == 1, "the chunks it claimed are held until they are given back")
    }
}
