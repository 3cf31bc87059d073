import PGPushCore

/// Every scheduling decision of one worker, as a pure state machine: claim sizing and the fast lane (through
/// its ``WorkScheduler``), the cadence of expansion, group commit and the shutdown's grace period. It does no
/// I/O and reads no clock: the worker's services report what happened, with the time, and carry out the
/// ``Action``s it returns.
public struct WorkerStateMachine<Completion: Sendable>: Sendable {
    public typealias Instant = ContinuousClock.Instant

    /// What a service does next.
    public enum Action: Sendable {
        /// Run this claim, then report ``claimSucceeded(_:budget:)`` or ``claimFailed()``.
        case claim(ClaimBudget)
        /// Claiming is over (graceful shutdown): the claim service ends, and no more chunks start.
        case stopClaiming
        /// Write these completions in one transaction, then report ``writeSucceeded()`` or ``writeFailed()``.
        case write([Completion])
        /// Wake the claim service: room was freed, or a full claim suggests more work is waiting.
        case wakeClaimer
        /// Expand due jobs now: small ones in batches until none is left, and with `lookForLargeJob` one
        /// broadcast's expansion too. Report ``smallJobsExpanded(_:claimed:budget:unclaimedChunks:)`` and
        /// ``largeJobLooked(found:)``.
        case expand(lookForLargeJob: Bool)
        /// Expand small jobs now (``smallJobTurn(throttles:)``): with a budget, claiming their chunks in the same
        /// statement (report ``smallJobsExpanded(_:claimed:budget:unclaimedChunks:batch:)`` or
        /// ``expansionClaimFailed()``); without one, while the claim service claims, only making their chunks
        /// (report ``smallJobsExpanded(_:)``, and go on while ``hasMoreSmallJobs(_:batch:)``).
        case expandSmallJobs(claiming: ClaimBudget?)
        /// Wake the expansion service: a large job was just found, so another may be due; a full batch of
        /// small jobs may have more behind it; or the claim service gives its turn to small jobs left queued.
        case wakeExpander
        /// Wait until this instant before expanding (passes are gathered), then ask ``expansionWoken(at:)`` again.
        case expandAt(Instant)
        /// A graceful shutdown began: start no new request, and give back what was not sent.
        case stopSending
        /// The grace period is over: drop the unwritten results (their chunks are rescued after the lease).
        case abandonWrites(completions: Int, tokens: Int)
        case none
    }

    public struct Configuration: Sendable, Hashable {
        public var scheduler: WorkScheduler<Completion>.Configuration
        /// The least time between two expansion passes: what a one-user job may wait for its batch at most.
        /// Trickling traffic NOTIFYs once per producer commit; at 500 one-user jobs a second a pass per commit
        /// planned and ran an expansion, and the claim it woke, for one or two jobs each.
        public var expansionGathering: Duration
        /// How often a broadcast's expansion is looked for while none was found.
        public var largeJobLookInterval: Duration
        /// How long a graceful shutdown may take to finish sending and write the results.
        public var gracePeriod: Duration

        public init(scheduler: WorkScheduler<Completion>.Configuration, expansionGathering: Duration = .milliseconds(10),
                    largeJobLookInterval: Duration = .milliseconds(100), gracePeriod: Duration = .seconds(25)) {
            self.scheduler = scheduler
            self.expansionGathering = expansionGathering
            self.largeJobLookInterval = largeJobLookInterval
            self.gracePeriod = gracePeriod
        }
    }

    /// Where the worker is in its life, and while it runs, who has the claim turn.
    enum Phase: Sendable, Hashable {
        case running(ClaimTurn)
        /// Graceful shutdown: nothing new is claimed or expanded; what is held finishes by `deadline`.
        case draining(deadline: Instant)
        /// The grace period ended: unwritten results were dropped and a failing write stops retrying.
        case abandoned
    }

    /// Who claims next between the claim service and the expansion, which claims the small jobs it makes in
    /// the same statement (``expansionClaim(throttles:)``). `claimerWaiting`: the claim service was turned away
    /// (or gave its turn to the expansion) and is woken when the expansion's claim ends.
    enum ClaimTurn: Sendable, Hashable {
        /// The claim service claims as the scheduler allows.
        case claimer
        /// The claim service gave its turn to the expansion, which wakes it when its claim ends.
        case givenToExpansion
        /// The expansion holds the claim budget.
        case expansionClaiming(claimerWaiting: Bool)
        /// The expansion found no room to claim small jobs into and left them queued: the next claim turn that
        /// has room is given to it.
        case expansionDeferred(claimerWaiting: Bool)

        var claimerWaiting: Bool {
            switch self {
            case .claimer: false
            case .givenToExpansion: true
            case .expansionClaiming(let waiting), .expansionDeferred(let waiting): waiting
            }
        }
    }

    /// What the expansion service is doing.
    enum ExpansionActivity: Sendable, Hashable {
        /// Waiting for its next wake.
        case idle
        /// Handling a wake (gathering, expanding, or backing off after a failure): a claim turn given to it now
        /// could wait that long.
        case handlingWake
    }

    /// What the last look for a broadcast's expansion found, and when it was made.
    enum LargeJobSearch: Sendable, Hashable {
        /// One was found: look again at the next pass.
        case found(lookedAt: Instant?)
        /// None was found (or none looked for yet): look again after ``Configuration/largeJobLookInterval``.
        case noneFound(lookedAt: Instant?)
    }

    public let configuration: Configuration
    public private(set) var scheduler: WorkScheduler<Completion>
    private(set) var phase = Phase.running(.claimer)
    private(set) var expansion = ExpansionActivity.idle
    private(set) var largeJobSearch = LargeJobSearch.noneFound(lookedAt: nil)

    /// Expansions that made small jobs, and the last of them a claim has served: while they differ, small work
    /// may be waiting for the fast lane.
    private var smallWorkExpanded = 0
    private var smallWorkServed = 0
    /// ``smallWorkExpanded`` when the running claim started: a claim that comes back not full took every ready
    /// small chunk there was up to then (it takes them first).
    private var smallWorkAtClaim = 0

    private var lastExpansionPass: Instant?

    public init(configuration: Configuration) {
        self.configuration = configuration
        self.scheduler = WorkScheduler(configuration: configuration.scheduler)
    }

    public var isDraining: Bool { !isRunning }

    private var isRunning: Bool {
        if case .running = phase { return true }
        return false
    }

    /// The claim turn while running; nil once a shutdown began.
    private var claimTurn: ClaimTurn? {
        if case .running(let turn) = phase { return turn }
        return nil
    }

    /// Hands the claim turn on; nothing changes once a shutdown began.
    private mutating func setClaimTurn(_ turn: ClaimTurn) {
        if isRunning { phase = .running(turn) }
    }

    private var smallJobsDeferred: Bool {
        if case .expansionDeferred = claimTurn { return true }
        return false
    }

    private var expansionClaiming: Bool {
        if case .expansionClaiming = claimTurn { return true }
        return false
    }

    /// When a graceful shutdown must be over, once one started.
    public var graceDeadline: Instant? {
        if case .draining(let deadline) = phase { return deadline }
        return nil
    }

    /// True once the grace period ended: a write that fails is not retried.
    public var writesAbandoned: Bool { phase == .abandoned }

    // MARK: Claiming

    /// What the claim service does when woken: a claim; its turn given to the expansion (``Action/wakeExpander``);
    /// nothing (one is running, too little room, writes failing); or, once a shutdown began, stop claiming.
    public mutating func nextClaim(throttles: [String: AppThrottle]) -> Action {
        guard let turn = claimTurn else { return .stopClaiming }
        if case .expansionDeferred = turn, expansion == .idle, scheduler.wouldClaim(smallWorkWaiting: true) {
            // Small jobs wait to be expanded into this room: the expansion claims them as it makes them (the
            // most urgent first), and wakes the claimer afterwards for whatever else is waiting.
            setClaimTurn(.givenToExpansion)
            return .wakeExpander
        }
        let smallWorkWaiting = smallWorkServed != smallWorkExpanded
        guard let budget = scheduler.nextClaim(throttles: throttles, smallWorkWaiting: smallWorkWaiting) else {
            // Turned away only because the expansion is claiming: it wakes the claimer when done.
            if case .expansionClaiming = turn { setClaimTurn(.expansionClaiming(claimerWaiting: true)) }
            return .none
        }
        smallWorkAtClaim = smallWorkExpanded
        return .claim(budget)
    }

    /// A claim returned these chunks (app and estimated tokens each). A full claim asks to claim again at once.
    public mutating func claimSucceeded(_ claimed: [(app: String, tokens: Int)], budget: ClaimBudget) -> Action {
        let full = scheduler.claimSucceeded(claimed, budget: budget)
        if !full { smallWorkServed = max(smallWorkServed, smallWorkAtClaim) }
        // Small jobs were left queued for want of room: the claim is over, the expansion may take its turn.
        return full ? .wakeClaimer : smallJobsDeferred ? .wakeExpander : .none
    }

    /// The claim failed: nothing was claimed. Once a shutdown began the claim service stops claiming;
    /// otherwise it retries after its backoff.
    public mutating func claimFailed() -> Action {
        scheduler.claimFailed()
        guard isRunning else { return .stopClaiming }
        return smallJobsDeferred ? .wakeExpander : .none
    }

    /// Whether a chunk of this many notifications counts in the fast lane.
    public func isSmall(tokens: Int) -> Bool { scheduler.isSmall(tokens: tokens) }

    /// Notifications of `app` left the worker's hands (answered, or given back unsent).
    public mutating func tokensFinished(app: String, tokens: Int, small: Bool) -> Action {
        scheduler.finished(app: app, tokens: tokens, small: small) ? .wakeClaimer : .none
    }

    // MARK: Writing (group commit)

    /// A chunk finished; `records` is what its completion writes, for the memory bound. A write starts at
    /// once when none is running; otherwise the completion joins the next batch.
    public mutating func chunkCompleted(_ completion: Completion, records: Int) -> Action {
        scheduler.completed(completion, tokens: records).map(Action.write) ?? .none
    }

    /// The running write committed: written results free room, and the batch that gathered meanwhile is
    /// written next.
    public mutating func writeSucceeded() -> [Action] {
        let next = scheduler.writeSucceeded()
        return [.wakeClaimer] + (next.map { [.write($0)] } ?? [])
    }

    /// The running write failed: its results are kept, claiming stops until a write succeeds, and the writer
    /// retries after its backoff (``retryWrite()``) unless the grace period is over.
    public mutating func writeFailed() -> Action {
        scheduler.writeFailed()
        return .none
    }

    /// After a failed write's backoff: what to write now.
    public mutating func retryWrite() -> Action {
        guard phase != .abandoned else { return .none }
        return scheduler.nextWrite().map(Action.write) ?? .none
    }

    public var unwrittenCount: Int { scheduler.unwrittenCount }

    // MARK: Expansion

    /// The expansion service was woken (NOTIFY, the poll tick, or claimed work). Passes are at least
    /// ``Configuration/expansionGathering`` apart, so a burst of commits makes one statement; a broadcast's
    /// expansion is looked for every ``Configuration/largeJobLookInterval``, or at once after one was found.
    public mutating func expansionWoken(at now: Instant) -> Action {
        guard isRunning else { return .none }
        expansion = .handlingWake
        if let last = lastExpansionPass, last + configuration.expansionGathering > now {
            return .expandAt(last + configuration.expansionGathering)
        }
        lastExpansionPass = now
        switch largeJobSearch {
        case .found:
            largeJobSearch = .found(lookedAt: now)
            return .expand(lookForLargeJob: true)
        case .noneFound(let lookedAt):
            guard lookedAt.map({ $0.duration(to: now) >= configuration.largeJobLookInterval }) ?? true else {
                return .expand(lookForLargeJob: false)
            }
            largeJobSearch = .noneFound(lookedAt: now)
            return .expand(lookForLargeJob: true)
        }
    }

    /// The expansion service finished handling a wake (after any backoff) and waits for the next.
    public mutating func expansionIdle() {
        expansion = .idle
    }

    /// One statement expanded `count` small jobs and left chunks for a claim: the claimer is woken for them,
    /// and the fast lane opens. Expanding goes on while full batches come back (``hasMoreSmallJobs(_:batch:)``).
    public mutating func smallJobsExpanded(_ count: Int) -> Action {
        guard count > 0 else { return .none }
        smallWorkExpanded &+= 1
        return .wakeClaimer
    }

    /// The budget for claiming the small jobs the expansion is about to make, in the same statement: what
    /// the claim service would get from ``nextClaim(throttles:)`` with small work waiting, or `nil` when it
    /// could claim nothing now (a claim is running, no room, writes failing, shutdown). Report the statement
    /// with ``smallJobsExpanded(_:claimed:budget:unclaimedChunks:)`` or ``claimFailed()``.
    ///
    /// Without a budget because a claim is running, small jobs are expanded without claiming
    /// (``claimIsRunning``): a claim takes their chunks in priority order. Without room at all, they are not
    /// expanded: they stay queued, where any worker with room takes them, and this one's next claim turn
    /// with room goes to the expansion (``nextClaim(throttles:)``).
    public mutating func expansionClaim(throttles: [String: AppThrottle]) -> ClaimBudget? {
        guard let turn = claimTurn else { return nil }
        let budget = scheduler.nextClaim(throttles: throttles, smallWorkWaiting: true)
        let waiting = turn.claimerWaiting
        if budget != nil {
            setClaimTurn(.expansionClaiming(claimerWaiting: waiting))
        } else if !scheduler.isClaiming {
            setClaimTurn(.expansionDeferred(claimerWaiting: waiting))
        } else {
            setClaimTurn(waiting ? .givenToExpansion : .claimer)
        }
        return budget
    }

    /// What the expansion does with due small jobs: ``Action/expandSmallJobs(claiming:)`` with the budget of
    /// ``expansionClaim(throttles:)``, or without one while the claim service claims (``claimIsRunning``), whose
    /// claim takes their chunks in priority order; `.none` when they stay queued (no room, or shutdown).
    public mutating func smallJobTurn(throttles: [String: AppThrottle]) -> Action {
        if let budget = expansionClaim(throttles: throttles) { return .expandSmallJobs(claiming: budget) }
        return claimIsRunning ? .expandSmallJobs(claiming: nil) : .none
    }

    /// The claim service is claiming: an expansion without a budget expands without claiming.
    public var claimIsRunning: Bool { scheduler.isClaiming && !expansionClaiming }

    /// The expansion's statement with a claim budget failed: nothing was claimed.
    public mutating func expansionClaimFailed() -> Action {
        scheduler.claimFailed()
        return expansionClaimEnded() ? .wakeClaimer : .none
    }

    /// Whether the claim service was turned away while the expansion claimed; the turn is the claimer's again.
    private mutating func expansionClaimEnded() -> Bool {
        guard let turn = claimTurn else { return false }
        if case .expansionDeferred = turn {
            setClaimTurn(.expansionDeferred(claimerWaiting: false))
        } else {
            setClaimTurn(.claimer)
        }
        return turn.claimerWaiting
    }

    /// One statement expanded `count` small jobs and claimed `claimed` of their chunks with `budget` (the
    /// expansion hands them to the sender). The claimer is woken when chunks were claimed, when chunks were left
    /// or the budget was used up, and when it was turned away meanwhile.
    public mutating func smallJobsExpanded(
        _ count: Int, claimed: [(app: String, tokens: Int)], budget: ClaimBudget, unclaimedChunks: Int
    ) -> Action {
        let full = scheduler.claimSucceeded(claimed, budget: budget)
        let turnedAway = expansionClaimEnded()
        // Chunks left behind (or more jobs than the budget took) are small work waiting for a claim.
        let leftForClaim = unclaimedChunks > 0 || full ? smallJobsExpanded(count) : .none
        if case .wakeClaimer = leftForClaim { return .wakeClaimer }
        return claimed.isEmpty && !turnedAway ? .none : .wakeClaimer
    }

    /// ``smallJobsExpanded(_:claimed:budget:unclaimedChunks:)`` for a statement that took at most `batch` jobs:
    /// a full batch wakes the expansion again (``hasMoreSmallJobs(_:batch:)``), so the claim service gets its
    /// turns in between.
    public mutating func smallJobsExpanded(
        _ count: Int, claimed: [(app: String, tokens: Int)], budget: ClaimBudget, unclaimedChunks: Int, batch: Int
    ) -> [Action] {
        let action = smallJobsExpanded(count, claimed: claimed, budget: budget, unclaimedChunks: unclaimedChunks)
        return [action] + (hasMoreSmallJobs(count, batch: batch) ? [.wakeExpander] : [])
    }

    /// Whether another small-job batch should follow one of `count` jobs out of `batch`.
    public func hasMoreSmallJobs(_ count: Int, batch: Int) -> Bool {
        isRunning && count >= batch
    }

    /// A broadcast's expansion was looked for. One found means claimable chunks, and maybe another due job.
    public mutating func largeJobLooked(found: Bool) -> [Action] {
        switch largeJobSearch {
        case .found(let lookedAt), .noneFound(let lookedAt):
            largeJobSearch = found ? .found(lookedAt: lookedAt) : .noneFound(lookedAt: lookedAt)
        }
        return found ? [.wakeClaimer, .wakeExpander] : []
    }

    // MARK: Shutdown

    /// Graceful shutdown began: claim and expand nothing more; what is held stops sending, finishes, and its
    /// results are written by the grace deadline. The claim service is woken to stop claiming, the expansion
    /// to see it. A second request changes nothing.
    public mutating func shutdownRequested(at now: Instant) -> [Action] {
        guard isRunning else { return [] }
        phase = .draining(deadline: now + configuration.gracePeriod)
        scheduler.startDraining()
        return [.stopSending, .wakeClaimer, .wakeExpander]
    }

    /// Whether the grace period is over at `now`.
    public func graceIsOver(at now: Instant) -> Bool {
        switch phase {
        case .running: false
        case .draining(let deadline): now >= deadline
        case .abandoned: true
        }
    }

    /// The grace period ended with results unwritten: they are dropped (the leases make them safe), and a
    /// failing write stops retrying.
    public mutating func graceEnded() -> Action {
        phase = .abandoned
        let dropped = scheduler.abandonUnwritten()
        return dropped.completions > 0 ? .abandonWrites(completions: dropped.completions, tokens: dropped.tokens) : .none
    }

    /// Whether shutdown may move past the writes: everything written, or the grace period over.
    public var writesSettled: Bool {
        phase == .abandoned || (!isRunning && scheduler.unwrittenCount == 0)
    }

    /// Notifications held now (a metric).
    public var held: Int { scheduler.held }
}
