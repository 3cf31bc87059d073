import Foundation
import Logging
import PGPushStore
import Synchronization

/// What the maintenance tasks work on: the store, the apps' senders and health, the Live Activity channels,
/// the maintenance leadership, the metrics they record and the configuration values they read.
struct WorkerMaintenance: Sendable {
    let configuration: WorkerConfiguration
    let store: any WorkerStore
    let registry: any AppSenders
    let appHealth: AppHealth
    let channels: ChannelManager
    /// Whether this worker held the maintenance lease at its last look (the leadership task's).
    let leadership: MaintenanceLeadership
    /// Notifications the worker holds now (a metric).
    let heldNotifications: @Sendable () -> Int
    let metrics: WorkerMetrics
    let logger: Logger
}

/// Whether this worker held the maintenance lease at its last look (the leadership task's): read by every
/// leader-only task before its pass.
final class MaintenanceLeadership: Sendable {
    private let leading = Atomic<Bool>(false)

    init() {}

    var isLeader: Bool { leading.load(ordering: .relaxed) }

    func set(_ isLeader: Bool) { leading.store(isLeader, ordering: .relaxed) }
}

extension MaintenanceTask {
    /// The worker's maintenance tasks. Every worker keeps its own apps current; one worker of the fleet, the
    /// leader (``QueueStore/acquireMaintenanceLeadership(lease:)``), keeps the queue.
    static func all(for worker: WorkerMaintenance) -> [MaintenanceTask] {
        let configuration = worker.configuration
        let every = configuration.maintenanceInterval
        let staleDeviceSweep = StaleDeviceSweepClock()
        return [
            // The senders and the pauses from one read, the senders first: an operator who fixes a topic or a
            // credential and resumes the app in one statement must never see a resume reach a sender that still
            // has the old one (its errors would pause the app again). Two tasks on their own timers did that.
            MaintenanceTask(name: "app reload", interval: every, leaderOnly: false) {
                let apps = try await worker.store.apps()
                await worker.registry.update(apps: apps)
                worker.appHealth.sync(pausedInDatabase: PauseTarget.paused(in: apps.values))
                await worker.registry.closeIdlePools(idleFor: configuration.idlePoolTimeout)
                await worker.samplePools()
                worker.metrics.pausedApps.record(apps.values.count { $0.pausedReason != nil })
                worker.metrics.heldNotifications.record(worker.heldNotifications())
            },
            MaintenanceTask(name: "leadership", interval: every, leaderOnly: false) {
                do {
                    let leading = try await worker.store.acquireMaintenanceLeadership(lease: configuration.leaderLease)
                    worker.leadership.set(leading)
                } catch {
                    // Not knowing is not leading: two leaders would be worse than none for a pass.
                    worker.leadership.set(false)
                    throw error
                }
            },
            // Queue upkeep, one task each, so that a lock held on push.deliveries or a failing statement stops
            // none of the others (they were one transaction).
            MaintenanceTask(name: "delivery partitions", interval: every, leaderOnly: true) {
                try await worker.store.createDeliveryPartitions()
            },
            MaintenanceTask(name: "drained jobs", interval: every, leaderOnly: true) {
                try await worker.store.finishDrainedJobs()
            },
            MaintenanceTask(name: "ended jobs' chunks", interval: every, leaderOnly: true) {
                try await worker.store.dropChunksOfEndedJobs()
            },
            MaintenanceTask(name: "answer window", interval: every, leaderOnly: true) {
                try await worker.store.trimAnswerWindow()
            },
            MaintenanceTask(name: "dead workers", interval: every, leaderOnly: true) {
                try await worker.store.removeDeadWorkers(silentFor: configuration.heartbeatInterval * 6)
            },
            MaintenanceTask(name: "retention", interval: every, leaderOnly: true) {
                let removed = try await worker.store.removeExpired(olderThan: configuration.retention)
                let events = try await worker.store.removeExpiredEvents(olderThan: configuration.retention)
                if removed.jobsRemoved + removed.auditRowsRemoved + removed.pruneCandidatesRemoved + events > 0 {
                    worker.logger.info("retention", metadata: [
                        "jobs": "\(removed.jobsRemoved)", "pruned_devices": "\(removed.auditRowsRemoved)",
                        "prune_candidates": "\(removed.pruneCandidatesRemoved)", "job_events": "\(events)",
                    ])
                }
            },
            MaintenanceTask(name: "pruning", interval: every, leaderOnly: true) { try await worker.prunePass() },
            // The badge steps of ended jobs are never read again (QueueStore.deviceContents(of:tokens:)).
            MaintenanceTask(name: "badge steps", interval: every, leaderOnly: true) {
                _ = try await worker.store.removeBadgeSteps()
            },
            // A person's frequency-cap slots outside every window no longer count (push.frequency_ledger).
            MaintenanceTask(name: "frequency slots", interval: every, leaderOnly: true) {
                _ = try await worker.store.forgetExpiredFrequencySlots(limit: 10_000)
            },
            // Every worker takes channel requests, a row at a time under a lease: "within seconds" of
            // push.create_channel, even while the leader is busy.
            MaintenanceTask(name: "channel requests", interval: configuration.channelPollInterval, leaderOnly: false) {
                try await worker.channels.runPending()
            },
            MaintenanceTask(name: "channel reconciling", interval: configuration.channelReconcileInterval, leaderOnly: true) {
                try await worker.channels.reconcile()
            },
            MaintenanceTask(name: "activity token expiry", interval: every, leaderOnly: true) {
                let expired = try await worker.store.expireActivityTokens(lifetime: configuration.activityTokenLifetime)
                if expired > 0 {
                    worker.metrics.recordPruned(reason: "ActivityTokenExpired", count: expired)
                    worker.logger.info("expired Live Activity update tokens removed", metadata: ["tokens": "\(expired)"])
                }
            },
            // Devices not registered again within --stale-device-days: a sweep of push.devices at most every
            // staleDeviceSweepInterval, looked for every pass so that a new leader sweeps soon.
            MaintenanceTask(name: "stale devices", interval: every, leaderOnly: true) {
                guard let age = configuration.staleDeviceAge,
                      staleDeviceSweep.isDue(every: configuration.staleDeviceSweepInterval) else { return }
                let removed = try await worker.sweepStaleDevices(olderThan: age)
                staleDeviceSweep.finished()
                if removed > 0 {
                    worker.logger.info("stale devices removed", metadata: [
                        "devices": "\(removed)", "stale_device_days": "\(age.inSeconds / 86_400)",
                    ])
                }
            },
            MaintenanceTask(name: "backlog metrics", interval: every, leaderOnly: true) {
                let backlog = try await worker.store.backlog()
                worker.metrics.backlogTokens.record(backlog.reduce(0) { $0 + $1.tokens })
                worker.metrics.oldestJobAge.record(backlog.map(\.oldestAgeSeconds).max() ?? 0)
            },
        ]
    }
}

extension WorkerMaintenance {
    /// The BadDeviceToken safety valve, then pruning in batches until none is full.
    func prunePass() async throws {
        let share = configuration.badDeviceTokenShare, minimum = configuration.badDeviceTokenMinimumAnswers
        for state in try await store.judgeBadDeviceTokenValve(share: share, minimumAnswers: minimum) {
            metrics.recordValve(app: state.appID, tripped: state.tripped, answered: state.answered, badDeviceTokens: state.badDeviceTokens)
            guard state.pausedApp || state.suppressed > 0 else { continue }
            if state.pausedApp { metrics.valveTrips.increment() }
            logger.critical("BadDeviceToken safety valve tripped: app paused, its BadDeviceToken reports kept unpruned", metadata: [
                "app": "\(state.appID)", "answered": "\(state.answered)", "bad_device_tokens": "\(state.badDeviceTokens)",
                "reports_suppressed": "\(state.suppressed)",
            ])
        }
        while true {
            let pruned = try await store.prune(share: share, minimumAnswers: minimum)
            for (reason, group) in Dictionary(grouping: pruned, by: \.reason) {
                metrics.recordPruned(reason: reason, count: group.count)
            }
            if pruned.count < 1000 { break }
        }
    }

    /// One sweep for stale devices, batch by batch, while this worker leads and is not stopping.
    func sweepStaleDevices(olderThan age: Duration) async throws -> Int {
        var removed = 0
        var next: String?
        repeat {
            let batch = try await store.removeStaleDevices(olderThan: age, after: next)
            removed += batch.removed
            if batch.removed > 0 { metrics.recordPruned(reason: QueueStore.staleDeviceReason, count: batch.removed) }
            next = batch.next
        } while next != nil && !Task.isCancelled && leadership.isLeader
        return removed
    }

    /// Samples the app pools' gauges.
    func samplePools() async {
        var streams = 0, open = 0, goaways = 0, reconnects = 0
        for (_, _, pool) in await registry.activePools() {
            let stats = pool.statistics
            streams += stats.streamsInFlight
            open += stats.connectionsOpen
            goaways += stats.goAwaysReceived
            reconnects += stats.reconnects
        }
        metrics.samplePools(streams: streams, connections: open, goaways: goaways, reconnects: reconnects)
    }
}

/// When the leader last finished a sweep for stale devices: a sweep reads all of `push.devices`, so it runs once
/// per ``WorkerConfiguration/staleDeviceSweepInterval``, not every maintenance pass.
final class StaleDeviceSweepClock: Sendable {
    private let lastFinished = Mutex<ContinuousClock.Instant?>(nil)

    func isDue(every interval: Duration, now: ContinuousClock.Instant = .now) -> Bool {
        lastFinished.withLock { last in last.map { now - $0 >= interval } ?? true }
    }

    func finished(at now: ContinuousClock.Instant = .now) {
        lastFinished.withLock { $0 = now }
    }
}
