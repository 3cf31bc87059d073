import PGPushCore

/// The worker's scheduling decisions, as a pure state machine: what to claim and how much, when to write
/// results and when to hold back. It does no I/O and reads no clock; the worker's loops carry out what it
/// returns and report back what happened.
///
/// Capacity is counted in notifications, not chunks: a one-token job and a 1,000-token chunk cost what they
/// send. Room frees token by token as answers arrive, so urgent work takes the next free room while a
/// broadcast runs. Results of many chunks are written together (group commit): a write starts as soon as the
/// previous one returned, never on a timer.
public struct WorkScheduler<Completion: Sendable>: Sendable {
    public struct Configuration: Sendable, Hashable {
        /// Notifications held at most: sending, waiting for their turn, or claimed ahead. A claim may overshoot
        /// by one chunk, so a full-size chunk fits into any room.
        public var capacity: Int
        /// Room that must be free before claiming while work is held: claims come in batches worth their
        /// statement, not one per answer.
        public var claimThreshold: Int
        /// Chunks in one claim at most (one-token jobs are one chunk each).
        public var maximumChunksPerClaim: Int
        /// How much of a throttled app to claim ahead, in seconds of its own sending.
        public var throttleHorizonSeconds: Double
        /// Completions in one write at most.
        public var maximumWriteBatch: Int
        /// Records (outcomes and requeued tokens) in one write at most, so one transaction stays short; a
        /// single completion larger than this is still written whole.
        public var maximumWriteRecords: Int
        /// Notifications of small chunks that may be held beyond ``capacity`` (the fast lane): a job for one
        /// user that was just expanded is claimed at once, instead of waiting until a broadcast's answers free
        /// the claim threshold. The lane is counted apart from the broadcast's room, so neither a chunk that
        /// overshot it nor a write backlog up to ``fastLaneBacklogLimit`` holds urgent work back. Defaults to
        /// the claim threshold.
        public var smallWorkOverdraft: Int
        /// Chunks of at most this many notifications count as small. Defaults to the claim threshold.
        public var smallChunkTokens: Int

        public init(capacity: Int, claimThreshold: Int? = nil, maximumChunksPerClaim: Int = 1000,
                    throttleHorizonSeconds: Double = 2, maximumWriteBatch: Int = 2000, maximumWriteRecords: Int = 10_000,
                    smallWorkOverdraft: Int? = nil, smallChunkTokens: Int? = nil) {
            self.capacity = max(1, capacity)
            self.claimThreshold = min(max(1, claimThreshold ?? max(1, capacity / 8)), self.capacity)
            self.smallWorkOverdraft = max(0, smallWorkOverdraft ?? self.claimThreshold)
            self.smallChunkTokens = max(1, smallChunkTokens ?? self.claimThreshold)
            self.maximumChunksPerClaim = max(1, maximumChunksPerClaim)
            self.throttleHorizonSeconds = throttleHorizonSeconds
            self.maximumWriteBatch = max(1, maximumWriteBatch)
            self.maximumWriteRecords = max(1, maximumWriteRecords)
        }
    }

    public let configuration: Configuration
    /// Notifications claimed and not yet finished sending, in all and per app.
    public private(set) var held = 0
    public private(set) var heldByApp: [String: Int] = [:]
    /// The part of ``held`` that small chunks hold: the fast lane's share.
    public private(set) var heldSmall = 0
    private var claiming = false
    private var draining = false
    /// Set while writes fail (the database is unreachable): nothing new is claimed, so unwritten results stay
    /// bounded.
    public private(set) var writesFailing = false
    private var pending: [(completion: Completion, tokens: Int)] = []
    private var pendingTokens = 0
    private var writing: [(completion: Completion, tokens: Int)]?

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Free room in notifications. Results waiting to be written beyond one capacity's worth shrink it, so a
    /// slow database slows claiming instead of growing memory.
    public var room: Int {
        configuration.capacity - held - max(0, pendingTokens - configuration.capacity)
    }

    /// Free room of the fast lane: the overdraft less what small chunks hold. A write backlog beyond
    /// ``fastLaneBacklogLimit`` closes it too, so memory stays bounded when the database cannot keep up.
    public var fastLaneRoom: Int {
        guard pendingTokens <= fastLaneBacklogLimit else { return 0 }
        return max(0, configuration.smallWorkOverdraft - heldSmall)
    }

    /// Unwritten records beyond which not even small work is claimed: twice the capacity, which ordinary
    /// claims alone never reach (they stop once the backlog passes one capacity and eats the room).
    public var fastLaneBacklogLimit: Int { 2 * configuration.capacity }

    /// Whether a chunk of this many notifications is small work, counted in the fast lane.
    public func isSmall(tokens: Int) -> Bool { tokens <= configuration.smallChunkTokens }

    /// Completions handed over and not yet written (waiting or being written).
    public var unwrittenCount: Int { pending.count + (writing?.count ?? 0) }

    /// True when nothing is held and every result is written.
    public var isIdle: Bool { held == 0 && unwrittenCount == 0 }

    // MARK: Claiming

    /// What to claim now, or `nil` to wait (a claim is running, shutdown, writes failing, or too little room).
    /// With `smallWorkWaiting` (small jobs were just expanded), a claim that the room would hold back is
    /// still made from the fast lane, for small chunks only: urgent one-user jobs never wait for a broadcast's
    /// answers to free the claim threshold.
    public mutating func nextClaim(throttles: [String: AppThrottle], smallWorkWaiting: Bool = false) -> ClaimBudget? {
        guard let (room, fastLane) = claimableRoom(smallWorkWaiting: smallWorkWaiting) else { return nil }
        var allowances: [String: Int] = [:]
        for (app, throttle) in throttles where throttle.isThrottled {
            allowances[app] = allowance(app, throttle)
        }
        claiming = true
        return ClaimBudget(room: room, maximumChunks: min(room, configuration.maximumChunksPerClaim), appAllowances: allowances,
                           maximumChunkTokens: fastLane ? configuration.smallChunkTokens : nil)
    }

    /// A claim is running (its budget is out).
    public var isClaiming: Bool { claiming }

    /// Whether ``nextClaim(throttles:smallWorkWaiting:)`` would give a budget now; changes nothing.
    public func wouldClaim(smallWorkWaiting: Bool) -> Bool {
        claimableRoom(smallWorkWaiting: smallWorkWaiting) != nil
    }

    /// The room a claim may take now, and whether it is the fast lane's (small chunks only); `nil` to wait.
    private func claimableRoom(smallWorkWaiting: Bool) -> (room: Int, fastLane: Bool)? {
        guard !claiming, !draining, !writesFailing else { return nil }
        let room = self.room
        if room > 0, held == 0 || room >= configuration.claimThreshold { return (room, false) }
        let lane = fastLaneRoom
        return smallWorkWaiting && lane > 0 ? (lane, true) : nil
    }

    /// Tokens an app may still take in one claim: a few seconds of its sending, less what it holds. An app
    /// that holds nothing may always take one chunk, whatever its size, or it would never send at all.
    func allowance(_ app: String, _ throttle: AppThrottle) -> Int {
        var ahead = Int.max
        if let rate = throttle.ratePerSecond {
            ahead = min(ahead, Int((rate * configuration.throttleHorizonSeconds).rounded(.up)))
        }
        if let concurrency = throttle.backoffConcurrency {
            ahead = min(ahead, 2 * max(1, concurrency))
        }
        let holding = heldByApp[app] ?? 0
        return holding == 0 ? max(1, ahead) : max(0, ahead - holding)
    }

    /// Records what a claim took (app and estimated tokens per chunk). Returns true when the claim was full,
    /// so more work is probably waiting and the worker should look again at once.
    public mutating func claimSucceeded(_ claimed: [(app: String, tokens: Int)], budget: ClaimBudget) -> Bool {
        claiming = false
        var tokens = 0
        for (app, count) in claimed {
            let count = max(0, count)
            heldByApp[app, default: 0] += count
            if isSmall(tokens: count) { heldSmall += count }
            tokens += count
        }
        held += tokens
        return !claimed.isEmpty && (claimed.count >= budget.maximumChunks || tokens >= budget.room)
    }

    public mutating func claimFailed() {
        claiming = false
    }

    /// Notifications of `app` that are no longer held (answered, or given back unsent); `small` when they
    /// belong to a chunk that ``isSmall(tokens:)`` counted in the fast lane. Returns true when this made
    /// enough room for a claim, so the worker should wake its claim loop.
    public mutating func finished(app: String, tokens: Int, small: Bool = false) -> Bool {
        guard tokens > 0 else { return false }
        let before = room
        let laneWasFull = fastLaneRoom == 0
        held = max(0, held - tokens)
        if small { heldSmall = max(0, heldSmall - tokens) }
        if let holding = heldByApp[app] {
            let left = holding - tokens
            heldByApp[app] = left > 0 ? left : nil
        }
        let threshold = held == 0 ? 1 : configuration.claimThreshold
        return (before < threshold && room >= threshold) || (laneWasFull && fastLaneRoom > 0)
    }

    // MARK: Writing

    /// Hands over a chunk's completion (`tokens` is what it records, for the memory bound). Returns a batch to
    /// write now when no write is running.
    public mutating func completed(_ completion: Completion, tokens: Int) -> [Completion]? {
        pending.append((completion, tokens))
        pendingTokens += tokens
        // While writes fail, the writer retries on its own backoff; a finishing chunk must not hurry it.
        return writesFailing ? nil : nextWrite()
    }

    /// The next batch to write, if no write is running and something waits. While writes fail, the writer
    /// asks again after its backoff.
    public mutating func nextWrite() -> [Completion]? {
        guard writing == nil, !pending.isEmpty else { return nil }
        var count = 0, records = 0
        while count < min(pending.count, configuration.maximumWriteBatch) {
            let next = pending[count].tokens
            if count > 0 && records + next > configuration.maximumWriteRecords { break }
            records += next
            count += 1
        }
        let batch = Array(pending.prefix(count))
        pending.removeFirst(count)
        writing = batch
        return batch.map(\.completion)
    }

    /// The running write committed. Returns the next batch, which waited meanwhile.
    public mutating func writeSucceeded() -> [Completion]? {
        if let batch = writing {
            pendingTokens -= batch.reduce(0) { $0 + $1.tokens }
        }
        writing = nil
        writesFailing = false
        return nextWrite()
    }

    /// The running write failed: its completions go back to the front, to be written first, and claiming
    /// stops until a write succeeds.
    public mutating func writeFailed() {
        if let batch = writing { pending.insert(contentsOf: batch, at: 0) }
        writing = nil
        writesFailing = true
    }

    // MARK: Shutdown

    /// Graceful shutdown: claim nothing more; what is held finishes, and its results are written.
    public mutating func startDraining() {
        draining = true
    }

    /// Gives up on results that could not be written before the grace period ended (the leases make the rest
    /// safe). Returns how many completions and notifications were dropped.
    public mutating func abandonUnwritten() -> (completions: Int, tokens: Int) {
        let dropped = (unwrittenCount, pendingTokens)
        pending = []
        writing = nil
        pendingTokens = 0
        return dropped
    }
}
