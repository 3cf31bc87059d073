import Foundation
import PGPushCore
import PGPushDispatcher
import PGPushStore
import Synchronization

/// The queue in memory, with the rules of the PostgreSQL store the worker relies on:
/// - a claim takes due chunks (`not_before` passed) of running jobs of apps not paused, higher priority first,
///   sized by the budget's room, chunk count, per-app allowances and largest chunk, and puts them under this
///   process's lease; a chunk whose lease ran out (on the ``TestClock``) under another owner is rescued, and every
///   claim counts one more on the chunk;
/// - a completion is written only while this process holds the chunk (`locked_by`), else it is reported as a
///   lease lost; it appends the outcomes and prune candidates, re-queues retries and given-back tokens as new
///   token chunks due at their `not_before`, and ends the job when its last chunk is gone;
/// - a release gives a chunk back without counting its claim; the heartbeat renews the leases it names;
/// - a cancelled job's chunks are no longer claimed; a failed job's chunks carry its reason when claimed.
///
/// Maintenance and Live Activity channel statements do nothing here. Every change wakes ``waitUntil(_:)``.
public final class InMemoryWorkerStore: WorkerStore {
    /// One chunk row.
    public struct Chunk: Sendable, Hashable {
        public var id: Int64
        public var jobID: Int64
        public var appID: String
        public var priority: Int
        public var seq: Int
        public var tokens: [String]
        public var attempt: Int
        public var lastReason: String?
        public var claims: Int
        public var notBefore: Date
        public var lockedBy: String?
        public var lockedUntil: Date?
        public var platform: DevicePlatform
    }

    /// How a job stands.
    public enum JobState: Sendable, Hashable {
        case running
        case cancelled
        /// Its last chunk was recorded.
        case done
    }

    /// One job row.
    public struct Job: Sendable {
        public var details: JobDetails
        public var state: JobState
        public var failureReason: String?
    }

    /// One `push.deliveries` row.
    public struct Delivery: Sendable, Hashable {
        public var jobID: Int64
        public var outcome: FinalOutcome
    }

    /// Everything the store holds, as a test reads it.
    public struct Contents: Sendable {
        public var apps: [String: AppRecord] = [:]
        public var jobs: [Int64: Job] = [:]
        public var chunks: [Int64: Chunk] = [:]
        public var deliveries: [Delivery] = []
        /// Web subscriptions' keys by (app, endpoint).
        public var webPushKeys: [String: [String: WebPushKeys]] = [:]
        /// Per app, category and token, the jobs that took a frequency-cap slot.
        public var frequencySlots: [String: [Int64]] = [:]
        public var pruneCandidates: [PruneCandidate] = []
        /// Chunk ids given back with ``release(_:deadline:)``.
        public var released: [Int64] = []
        /// Every completion written, in order (lease lost ones included).
        public var completions: [ChunkCompletion] = []
        /// Chunk ids whose completion came after this process lost the lease.
        public var leaseLost: [Int64] = []
        /// The budgets of the claims, in order.
        public var claimBudgets: [ClaimBudget] = []
        public var heartbeats = 0
        public var registered = false
        public var unregistered = false
        public var nextID: Int64 = 1

        /// The deliveries of one job.
        public func deliveries(of job: Int64) -> [FinalOutcome] {
            deliveries.filter { $0.jobID == job }.map(\.outcome)
        }

        /// The chunks of one job still queued or held.
        public func chunks(of job: Int64) -> [Chunk] {
            chunks.values.filter { $0.jobID == job }.sorted { $0.id < $1.id }
        }
    }

    private struct Waiter {
        var predicate: @Sendable (Contents) -> Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    private let state = Mutex<(contents: Contents, waiters: [Waiter])>((Contents(), []))
    private let clock: TestClock
    public let leaseOwner: String
    /// What ``heartbeat(lease:liveWindow:holding:)`` reports as the live workers.
    public let liveWorkers: Atomic<Int> = Atomic(1)
    /// Set to make every statement fail, as an unreachable database does.
    public let failing: Atomic<Bool> = Atomic(false)
    /// Holds claims' answers back after they took their chunks (``HeldClaimAnswers/hold()``).
    public let claimAnswers = HeldClaimAnswers()
    private let statements = Atomic<Int>(0)

    public init(clock: TestClock, leaseOwner: String = "test-worker:1") {
        self.clock = clock
        self.leaseOwner = leaseOwner
    }

    /// A copy of what the store holds now.
    public var contents: Contents { state.withLock(\.contents) }

    public var statementsExecuted: Int { statements.load(ordering: .relaxed) }

    /// Returns once `predicate` holds for the store's contents (at once if it does now).
    public func waitUntil(_ predicate: @escaping @Sendable (Contents) -> Bool) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if predicate(state.contents) { return true }
                state.waiters.append(Waiter(predicate: predicate, continuation: continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    // MARK: What a producer and an operator do

    /// Adds (or replaces) an app's row.
    public func addApp(_ app: AppRecord) {
        change { $0.apps[app.id] = app }
    }

    /// Enqueues a job to `tokens`, split into token chunks of `chunkSize`; returns its id.
    @discardableResult
    public func enqueue(
        app appID: String, tokens: [String], priority: Int = 0, pushType: String = "alert", expiresAt: Date? = nil,
        payload: String = #"{"aps":{"alert":"hi"}}"#, chunkSize: Int = 1000, platform: DevicePlatform = .ios
    ) -> Int64 {
        change { contents in
            let jobID = contents.nextID
            contents.nextID += 1
            let details = JobDetails(id: jobID, appID: appID, payload: Array(payload.utf8), pushType: pushType, expiresAt: expiresAt)
            contents.jobs[jobID] = Job(details: details, state: .running)
            for (seq, start) in stride(from: 0, to: tokens.count, by: max(1, chunkSize)).enumerated() {
                let slice = Array(tokens[start..<min(tokens.count, start + max(1, chunkSize))])
                Self.addChunk(&contents, job: jobID, app: appID, priority: priority, seq: seq, tokens: slice, attempt: 1,
                              lastReason: nil, notBefore: clock.now, platform: platform)
            }
            return jobID
        }
    }

    /// Cancels a job, as `push.cancel` does: its chunks are no longer claimed.
    public func cancel(_ jobID: Int64) {
        change { contents in
            contents.jobs[jobID]?.state = .cancelled
            for chunk in contents.chunks.values where chunk.jobID == jobID && chunk.lockedBy == nil {
                contents.chunks[chunk.id] = nil
            }
        }
    }

    /// Pauses an app, as an operator (or another worker) does.
    public func pause(_ appID: String, reason: String) {
        change { $0.apps[appID]?.pausedReason = reason }
    }

    /// Another process rescues a chunk (its lease ran out): it holds the chunk now, and its claim counts.
    public func rescue(_ chunkID: Int64, by owner: String = "other-worker:2", lease: Duration = .seconds(30)) {
        change { contents in
            contents.chunks[chunkID]?.lockedBy = owner
            contents.chunks[chunkID]?.lockedUntil = clock.now.addingTimeInterval(lease.seconds)
            contents.chunks[chunkID]?.claims += 1
        }
    }

    // MARK: WorkerQueueStore

    public func registerWorker(hostname: String, pid: Int) async throws {
        try statement()
        change { $0.registered = true }
    }

    public func unregisterWorker(deadline: Duration) async throws {
        try statement()
        change { $0.unregistered = true }
    }

    public func heartbeat(lease: Duration, liveWindow: Duration, holding: [Int64]) async throws -> Int {
        try statement()
        let until = clock.now.addingTimeInterval(lease.seconds)
        change { contents in
            contents.heartbeats += 1
            for id in holding where contents.chunks[id]?.lockedBy == leaseOwner {
                contents.chunks[id]?.lockedUntil = until
            }
        }
        return max(1, liveWorkers.load(ordering: .relaxed))
    }

    public func claimChunks(_ budget: ClaimBudget, lease: Duration) async throws -> [ClaimedChunk] {
        try statement()
        let now = clock.now
        let claimed = change { contents -> [ClaimedChunk] in
            contents.claimBudgets.append(budget)
            guard budget.room > 0, budget.maximumChunks > 0 else { return [] }
            let candidates = contents.chunks.values.filter { chunk in
                let free = chunk.lockedBy == nil && chunk.notBefore <= now
                let rescue = chunk.lockedBy != nil && chunk.lockedBy != leaseOwner && (chunk.lockedUntil ?? now) < now
                guard free || rescue else { return false }
                if let allowance = budget.appAllowances[chunk.appID], allowance <= 0 { return false }
                if let largest = budget.maximumChunkTokens, chunk.tokens.count > largest { return false }
                return contents.apps[chunk.appID]?.pausedReason == nil
            }
            .sorted { ($1.priority, $0.seq, $0.id) < ($0.priority, $1.seq, $1.id) }
            .prefix(budget.maximumChunks)
            var before = 0
            var appBefore: [String: Int] = [:]
            var claimed: [ClaimedChunk] = []
            for chunk in candidates {
                let tokens = chunk.tokens.count
                if let allowance = budget.appAllowances[chunk.appID], appBefore[chunk.appID, default: 0] >= allowance { continue }
                appBefore[chunk.appID, default: 0] += tokens
                defer { before += tokens }
                guard before < budget.room else { continue }
                guard let job = contents.jobs[chunk.jobID], job.state == .running else { continue }
                var held = chunk
                held.lockedBy = leaseOwner
                held.lockedUntil = now.addingTimeInterval(lease.seconds)
                held.claims += 1
                contents.chunks[chunk.id] = held
                claimed.append(ClaimedChunk(
                    id: held.id, jobID: held.jobID, appID: held.appID, priority: held.priority, seq: held.seq, kind: .tokens,
                    tokens: held.tokens, attempt: held.attempt, lastReason: held.lastReason, claims: held.claims,
                    estimatedTokens: tokens, job: job.details, jobFailure: job.failureReason, platform: held.platform))
            }
            return claimed.sorted(by: ClaimedChunk.claimOrder)
        }
        if !claimed.isEmpty { try await claimAnswers.arrive() }
        return claimed
    }

    public func release(_ chunkIDs: [Int64], deadline: Duration) async throws {
        try statement()
        change { contents in
            for id in chunkIDs where contents.chunks[id]?.lockedBy == leaseOwner {
                contents.chunks[id]?.lockedBy = nil
                contents.chunks[id]?.lockedUntil = nil
                let claims = contents.chunks[id]?.claims ?? 1
                contents.chunks[id]?.claims = max(0, claims - 1)
                contents.released.append(id)
            }
        }
    }

    public func tokens(of chunk: ClaimedChunk) async throws -> [String] {
        try statement()
        return chunk.tokens
    }

    public func personalTokens(of chunk: ClaimedChunk) async throws -> PersonalTokens {
        try statement()
        return PersonalTokens(tokens: chunk.tokens, contents: chunk.tokens.map { _ in nil })
    }

    public func complete(_ completions: [ChunkCompletion]) async throws -> CompletionReport {
        try statement()
        return change { contents in
            var lost: [Int64] = []
            var finished = 0
            for completion in completions {
                contents.completions.append(completion)
                let id = completion.chunk.id
                guard let chunk = contents.chunks[id], chunk.lockedBy == leaseOwner else {
                    lost.append(id)
                    contents.leaseLost.append(id)
                    continue
                }
                contents.chunks[id] = nil
                contents.deliveries += completion.outcomes.map { Delivery(jobID: chunk.jobID, outcome: $0) }
                contents.pruneCandidates += completion.pruneCandidates
                if contents.jobs[chunk.jobID]?.state == .running {
                    for requeued in completion.requeued where !requeued.tokens.isEmpty {
                        Self.addChunk(&contents, job: chunk.jobID, app: chunk.appID, priority: chunk.priority, seq: chunk.seq,
                                      tokens: requeued.tokens, attempt: requeued.attempt, lastReason: requeued.lastReason,
                                      notBefore: requeued.notBefore, platform: chunk.platform)
                    }
                }
                if contents.jobs[chunk.jobID]?.state == .running, !contents.chunks.values.contains(where: { $0.jobID == chunk.jobID }) {
                    contents.jobs[chunk.jobID]?.state = .done
                    finished += 1
                }
            }
            return .written(leaseLost: lost, jobsFinished: finished)
        }
    }

    public func expandDueSmallJobs(chunkSize: Int, limit: Int, claiming budget: ClaimBudget?, lease: Duration) async throws
        -> QueueStore.SmallJobExpansion {
        // Jobs are enqueued as chunks already.
        try statement()
        return QueueStore.SmallJobExpansion(jobs: 0, unclaimedChunks: 0, claimed: [])
    }

    public func expandNextDueJob(chunkSize: Int, includingSmallJobs: Bool) async throws -> QueueStore.Expansion? {
        try statement()
        return nil
    }

    public func failJob(_ jobID: Int64, reason: String) async throws {
        try statement()
        change { contents in
            if contents.jobs[jobID]?.failureReason == nil { contents.jobs[jobID]?.failureReason = reason }
        }
    }

    public func pauseApp(_ appID: String, reason: String) async throws -> Bool {
        try statement()
        return change { contents in
            guard contents.apps[appID] != nil, contents.apps[appID]?.pausedReason == nil else { return false }
            contents.apps[appID]?.pausedReason = reason
            return true
        }
    }

    public func pauseWebPush(_ appID: String, reason: String) async throws -> Bool {
        try statement()
        return change { contents in
            guard contents.apps[appID] != nil, contents.apps[appID]?.webPushPausedReason == nil else { return false }
            contents.apps[appID]?.webPushPausedReason = reason
            return true
        }
    }

    public func webPushKeys(appID: String, tokens: [String]) async throws -> [String: WebPushKeys] {
        try statement()
        let known = contents.webPushKeys[appID] ?? [:]
        return known.filter { tokens.contains($0.key) }
    }

    /// No chunk here is scheduled ahead.
    public func pacedChunksDue(within window: Duration) async throws -> [Duration] {
        try statement()
        return []
    }

    /// Every token's person is the token itself here (no devices table): a token that already got `maximumJobs`
    /// jobs of the category is capped; a job counts once per token. Slots never age out.
    public func takeFrequencySlots(
        appID: String, jobID: Int64, category: String, cap: FrequencyCap, tokens: [String]
    ) async throws -> [String] {
        try statement()
        return change { contents in
            var capped: [String] = []
            for token in tokens {
                let key = "\(appID)\u{0}\(category)\u{0}\(token)"
                var jobs = contents.frequencySlots[key] ?? []
                if jobs.contains(jobID) { continue }
                if jobs.count >= cap.maximumJobs { capped.append(token); continue }
                jobs.append(jobID)
                contents.frequencySlots[key] = jobs
            }
            return capped
        }
    }

    public func apps() async throws -> [String: AppRecord] {
        try statement()
        return contents.apps
    }

    public func notify(_ channel: String, payload: String) async throws {
        try statement()
    }

    // MARK: WorkerMaintenanceStore: nothing to keep in memory

    public func acquireMaintenanceLeadership(lease: Duration) async throws -> Bool { try statement(); return true }
    public func releaseMaintenanceLeadership(deadline: Duration) async throws { try statement() }
    public func createDeliveryPartitions() async throws -> Int { try statement(); return 0 }
    public func finishDrainedJobs() async throws -> Int { try statement(); return 0 }
    public func dropChunksOfEndedJobs() async throws -> Int { try statement(); return 0 }
    public func trimAnswerWindow() async throws -> Int { try statement(); return 0 }
    public func removeDeadWorkers(silentFor: Duration) async throws -> Int { try statement(); return 0 }
    public func removeExpired(olderThan keep: Duration, batchSize: Int) async throws -> QueueStore.MaintenanceReport {
        try statement()
        return .nothingDone(ranAsLeader: true)
    }
    public func removeExpiredEvents(olderThan keep: Duration, batchSize: Int, maximumBatches: Int) async throws -> Int {
        try statement()
        return 0
    }
    public func judgeBadDeviceTokenValve(share: Double, minimumAnswers: Int) async throws -> [QueueStore.ValveState] {
        try statement()
        return []
    }
    public func prune(share: Double, minimumAnswers: Int, batchSize: Int, dryRun: Bool) async throws -> [QueueStore.PrunedDevice] {
        try statement()
        return []
    }
    public func removeStaleDevices(olderThan age: Duration, after: String?, batchSize: Int) async throws -> QueueStore.StaleDeviceBatch {
        try statement()
        return QueueStore.StaleDeviceBatch(removed: 0, next: nil)
    }
    public func removeBadgeSteps(batchSize: Int) async throws -> Int { try statement(); return 0 }
    public func forgetExpiredFrequencySlots(limit: Int) async throws -> Int { try statement(); return 0 }
    public func expireActivityTokens(lifetime: Duration, batchSize: Int) async throws -> Int { try statement(); return 0 }
    public func backlog() async throws -> [(appID: String, tokens: Int64, oldestAgeSeconds: Double)] {
        try statement()
        let contents = self.contents
        return Dictionary(grouping: contents.chunks.values, by: \.appID).map { app, chunks in
            (app, Int64(chunks.reduce(0) { $0 + $1.tokens.count }), 0)
        }
    }

    // MARK: WorkerChannelStore: no channels here

    public func claimChannelWork(limit: Int, lease: Duration) async throws -> [ChannelWork] { try statement(); return [] }
    public func channelCreated(_ id: Int64, channelID: String) async throws -> Bool { try statement(); return false }
    public func channelDeleted(_ id: Int64, note: String?) async throws { try statement() }
    public func channelFailed(_ id: Int64, reason: String) async throws { try statement() }
    public func channelRetry(_ id: Int64, reason: String, after: Duration) async throws { try statement() }
    public func activeChannels() async throws -> [ActiveChannels] { try statement(); return [] }
    public func reconcileChannels(appID: String, listed: [String], asOf: Date) async throws -> [String] { try statement(); return [] }

    // MARK: Helpers

    /// The error every statement throws while ``failing`` is set.
    public struct Unavailable: Error {}

    private func statement() throws {
        statements.add(1, ordering: .relaxed)
        if failing.load(ordering: .relaxed) { throw Unavailable() }
    }

    /// Changes the contents and wakes the waiters whose condition now holds.
    @discardableResult
    private func change<T: Sendable>(_ body: (inout Contents) -> T) -> T {
        let (result, ready) = state.withLock { state -> (T, [CheckedContinuation<Void, Never>]) in
            let result = body(&state.contents)
            var ready: [CheckedContinuation<Void, Never>] = []
            var waiting: [Waiter] = []
            for waiter in state.waiters {
                if waiter.predicate(state.contents) { ready.append(waiter.continuation) } else { waiting.append(waiter) }
            }
            state.waiters = waiting
            return (result, ready)
        }
        for continuation in ready { continuation.resume() }
        return result
    }

    private static func addChunk(
        _ contents: inout Contents, job: Int64, app: String, priority: Int, seq: Int, tokens: [String], attempt: Int,
        lastReason: String?, notBefore: Date, platform: DevicePlatform
    ) {
        let id = contents.nextID
        contents.nextID += 1
        contents.chunks[id] = Chunk(
            id: id, jobID: job, appID: app, priority: priority, seq: seq, tokens: tokens, attempt: attempt,
            lastReason: lastReason, claims: 0, notBefore: notBefore, lockedBy: nil, lockedUntil: nil, platform: platform)
    }
}
