import Foundation
import PGPushCore
import PGPushStore

/// The queue as the worker uses it: every statement ``Worker``, the chunk processor and the worker's services
/// run, in three parts (sending, maintenance, Live Activity channels). ``QueueStore`` is the production store
/// (PostgreSQL); PGPushDispatcherTesting's `InMemoryWorkerStore` keeps the same rules in memory, so the worker
/// can be tested without a database.
///
/// A requirement keeps the store's full parameter list; the worker's shorter calls (the store's defaults) are
/// in the extension below.
public protocol WorkerStore: WorkerQueueStore, WorkerMaintenanceStore, WorkerChannelStore {}

/// What claiming, sending and recording need: the worker's registration and heartbeat, claims under a lease,
/// a chunk's tokens, the guarded completion, and the verdicts on jobs and apps.
public protocol WorkerQueueStore: Sendable {
    /// Who holds this process's leases (`locked_by`).
    var leaseOwner: String { get }
    /// Statements sent so far, for the worker's last log line.
    var statementsExecuted: Int { get }

    /// Adds (or refreshes) this worker's row in the live-worker registry.
    func registerWorker(hostname: String, pid: Int) async throws
    /// Removes this worker's registry row.
    func unregisterWorker(deadline: Duration) async throws
    /// Renews the leases of `holding` and this worker's registry row; returns the live workers (at least 1).
    func heartbeat(lease: Duration, liveWindow: Duration, holding: [Int64]) async throws -> Int
    /// Claims due chunks sized to `budget` under a lease of `lease`; a rescued chunk counts a claim more.
    func claimChunks(_ budget: ClaimBudget, lease: Duration) async throws -> [ClaimedChunk]
    /// Gives chunks back unsent, their claim not counted.
    func release(_ chunkIDs: [Int64], deadline: Duration) async throws
    /// A range chunk's tokens (a token chunk's are in its row).
    func tokens(of chunk: ClaimedChunk) async throws -> [String]
    /// A per-device-content chunk's tokens with each device's locale and badge step.
    func personalTokens(of chunk: ClaimedChunk) async throws -> PersonalTokens
    /// Records completions in one transaction, each guarded by this worker's lease.
    func complete(_ completions: [ChunkCompletion]) async throws -> CompletionReport
    /// Turns due small jobs into chunks, claiming them into `budget` when one is given.
    func expandDueSmallJobs(chunkSize: Int, limit: Int, claiming budget: ClaimBudget?, lease: Duration) async throws
        -> QueueStore.SmallJobExpansion
    /// Expands the next due job (a broadcast) into range chunks.
    func expandNextDueJob(chunkSize: Int, includingSmallJobs: Bool) async throws -> QueueStore.Expansion?
    /// Ends a job with a job-level error for every token left.
    func failJob(_ jobID: Int64, reason: String) async throws
    /// Pauses an app with a readable reason; false when it was paused already.
    @discardableResult
    func pauseApp(_ appID: String, reason: String) async throws -> Bool
    /// Pauses an app's Web Push only (a push service refused its VAPID key); true when this call paused it.
    @discardableResult
    func pauseWebPush(_ appID: String, reason: String) async throws -> Bool
    /// The keys of the app's web subscriptions among `tokens`, by endpoint.
    func webPushKeys(appID: String, tokens: [String]) async throws -> [String: WebPushKeys]
    /// How long until each of the next chunks of paced jobs comes due, within `window`, soonest first.
    func pacedChunksDue(within window: Duration) async throws -> [Duration]
    /// Takes a slot of the job's category cap for each person among `tokens`; returns the tokens whose person
    /// has none left (``QueueStore/takeFrequencySlots(appID:jobID:category:cap:tokens:)``).
    func takeFrequencySlots(appID: String, jobID: Int64, category: String, cap: FrequencyCap, tokens: [String]) async throws -> [String]
    /// Every app's row, by id.
    func apps() async throws -> [String: AppRecord]
    /// Sends a NOTIFY.
    func notify(_ channel: String, payload: String) async throws
}

/// What the maintenance tasks run (one leader at a time, beside the sending).
public protocol WorkerMaintenanceStore: Sendable {
    func acquireMaintenanceLeadership(lease: Duration) async throws -> Bool
    func releaseMaintenanceLeadership(deadline: Duration) async throws
    @discardableResult
    func createDeliveryPartitions() async throws -> Int
    @discardableResult
    func finishDrainedJobs() async throws -> Int
    @discardableResult
    func dropChunksOfEndedJobs() async throws -> Int
    @discardableResult
    func trimAnswerWindow() async throws -> Int
    @discardableResult
    func removeDeadWorkers(silentFor: Duration) async throws -> Int
    func removeExpired(olderThan keep: Duration, batchSize: Int) async throws -> QueueStore.MaintenanceReport
    func removeExpiredEvents(olderThan keep: Duration, batchSize: Int, maximumBatches: Int) async throws -> Int
    func judgeBadDeviceTokenValve(share: Double, minimumAnswers: Int) async throws -> [QueueStore.ValveState]
    func prune(share: Double, minimumAnswers: Int, batchSize: Int, dryRun: Bool) async throws -> [QueueStore.PrunedDevice]
    func removeStaleDevices(olderThan age: Duration, after: String?, batchSize: Int) async throws -> QueueStore.StaleDeviceBatch
    func removeBadgeSteps(batchSize: Int) async throws -> Int
    func forgetExpiredFrequencySlots(limit: Int) async throws -> Int
    func expireActivityTokens(lifetime: Duration, batchSize: Int) async throws -> Int
    func backlog() async throws -> [(appID: String, tokens: Int64, oldestAgeSeconds: Double)]
}

/// What the Live Activity channel manager runs.
public protocol WorkerChannelStore: Sendable {
    func claimChannelWork(limit: Int, lease: Duration) async throws -> [ChannelWork]
    @discardableResult
    func channelCreated(_ id: Int64, channelID: String) async throws -> Bool
    func channelDeleted(_ id: Int64, note: String?) async throws
    func channelFailed(_ id: Int64, reason: String) async throws
    func channelRetry(_ id: Int64, reason: String, after: Duration) async throws
    func activeChannels() async throws -> [ActiveChannels]
    func reconcileChannels(appID: String, listed: [String], asOf: Date) async throws -> [String]
}

extension QueueStore: WorkerStore {}

// The worker's calls that leave parameters at QueueStore's defaults.
extension WorkerQueueStore {
    public func expandDueSmallJobs(chunkSize: Int, limit: Int) async throws -> Int {
        try await expandDueSmallJobs(chunkSize: chunkSize, limit: limit, claiming: nil, lease: .zero).jobs
    }
}

extension WorkerMaintenanceStore {
    public func removeExpired(olderThan keep: Duration) async throws -> QueueStore.MaintenanceReport {
        try await removeExpired(olderThan: keep, batchSize: 1000)
    }

    public func removeExpiredEvents(olderThan keep: Duration) async throws -> Int {
        try await removeExpiredEvents(olderThan: keep, batchSize: 5000, maximumBatches: 20)
    }

    public func prune(share: Double, minimumAnswers: Int) async throws -> [QueueStore.PrunedDevice] {
        try await prune(share: share, minimumAnswers: minimumAnswers, batchSize: 5000, dryRun: false)
    }

    public func removeStaleDevices(olderThan age: Duration, after: String?) async throws -> QueueStore.StaleDeviceBatch {
        try await removeStaleDevices(olderThan: age, after: after, batchSize: 5000)
    }

    public func removeBadgeSteps() async throws -> Int {
        try await removeBadgeSteps(batchSize: 5000)
    }

    public func expireActivityTokens(lifetime: Duration) async throws -> Int {
        try await expireActivityTokens(lifetime: lifetime, batchSize: 5000)
    }
}

extension WorkerChannelStore {
    public func channelDeleted(_ id: Int64) async throws {
        try await channelDeleted(id, note: nil)
    }
}
