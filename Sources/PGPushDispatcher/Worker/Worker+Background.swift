import Foundation
import Logging
import PGPushStore
import PostgresNIO
import Synchronization

extension Worker {
    /// The poll backstop: wakes the claim loop every `pollInterval` even if no NOTIFY arrives.
    func ticker() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: configuration.pollInterval)
            wake.yield()
            expansionWake.yield()
        }
    }

    /// Renews this worker's leases and registry heartbeat, and re-divides rate limits by the live workers.
    func heartbeatLoop() async {
        while !Task.isCancelled {
            do {
                let holding = Array(heldChunks.withLock { $0 })
                let live = try await store.heartbeat(
                    lease: configuration.lease, liveWindow: configuration.heartbeatInterval * 3, holding: holding)
                health.withLock { $0.databaseAnswered(at: .now) }
                databaseAnswered()
                await registry.setLiveWorkers(live)
            } catch {
                if Task.isCancelled { return }
                if !databaseFailed(error) {
                    logger.warning("heartbeat failed", metadata: ["error": "\(LoggableError.describe(error))"])
                }
            }
            try? await Task.sleep(for: configuration.heartbeatInterval)
        }
    }

    /// LISTEN for new jobs; a notification only wakes the expansion (the poll is the backstop). LISTEN needs a
    /// session of its own: through PgBouncer in transaction pooling it is accepted but delivers nothing. So once
    /// it stands, the worker sends itself a probe through its statement client and says so in the log if the
    /// probe never arrives.
    func listenLoop(_ listener: PostgresClient) async {
        let probe = "probe:\(store.leaseOwner)"
        let heard = Atomic<Bool>(false)
        await listen(listener, on: QueueStore.jobsChannel, whenListening: {
            guard !heard.load(ordering: .relaxed) else { return }
            try? await self.store.notify(QueueStore.jobsChannel, payload: probe)
            try? await Task.sleep(for: Self.listenProbeWait)
            if !heard.load(ordering: .relaxed), !Task.isCancelled {
                self.logger.warning("LISTEN delivers no notifications (a transaction pooler in front?); new work is found by polling every \(self.configuration.pollInterval). Give --listen-database-url a direct or session-mode URL for immediate wake-ups")
            }
        }) { payload in
            if payload == probe { heard.store(true, ordering: .relaxed) }
            self.expansionWake.yield()
        }
    }

    static let listenProbeWait: Duration = .seconds(5)

    /// LISTEN for cancels: a cancelled job's chunks held here stop at their next token. The claim and the
    /// completion check the job's state too; this makes the stop immediate.
    func cancelListenLoop(_ listener: PostgresClient) async {
        await listen(listener, on: QueueStore.cancelChannel) { payload in
            if let job = Int64(payload) { self.verdicts.cancel(job) }
        }
    }

    private func listen(
        _ listener: PostgresClient, on channel: String, whenListening: (@Sendable () async -> Void)? = nil,
        _ received: @escaping @Sendable (String) -> Void
    ) async {
        var failures = 0
        while !Task.isCancelled {
            do {
                try await listener.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        failures = 0
                        // Whatever was committed while no LISTEN stood is found by the next poll.
                        self.expansionWake.yield()
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            if let whenListening { group.addTask { await whenListening() } }
                            for try await notification in notifications {
                                received(notification.payload)
                            }
                            group.cancelAll()
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                failures += 1
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("LISTEN failed; polling every \(configuration.pollInterval) until it is back", metadata: [
                        "channel": "\(channel)", "error": "\(LoggableError.describe(error))",
                    ])
                }
                try? await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// Maintenance, app reloads, the pruner and metric samples. Each step fails alone: an error is logged and
    /// the other steps still run, so a failed app reload never skips retention or pruning. The steps that
    /// must run once per database run on the leader only (``QueueStore/acquireMaintenanceLeadership(lease:)``).
    func maintenanceLoop() async {
        while !Task.isCancelled {
            await maintenanceStep("app reload") {
                try await self.registry.reload()
                await self.registry.closeIdlePools(idleFor: self.configuration.idlePoolTimeout)
            }
            await maintenanceStep("pause sync") {
                let apps = try await self.store.apps()
                self.appHealth.sync(pausedInDatabase: Set(apps.values.filter { $0.pausedReason != nil }.map(\.id)))
                self.metrics.pausedApps.record(apps.values.count { $0.pausedReason != nil })
            }
            var leading = false
            await maintenanceStep("leadership") {
                leading = try await self.store.acquireMaintenanceLeadership(lease: self.configuration.leaderLease)
            }
            if leading {
                await leaderPass()
            }
            samplePools()
            metrics.heldNotifications.record(scheduler.withLock { $0.held })
            try? await Task.sleep(for: configuration.maintenanceInterval)
        }
    }

    /// The steps one worker of the fleet runs: the queue's upkeep, retention, the pruner and the backlog metrics.
    func leaderPass() async {
        let deadAfter = configuration.heartbeatInterval * 6
        await maintenanceStep("queue upkeep") {
            _ = try await self.store.maintain(deadWorkerAfter: deadAfter)
        }
        await maintenanceStep("retention") {
            let removed = try await self.store.removeExpired(olderThan: self.configuration.retention)
            if removed.jobsRemoved + removed.auditRowsRemoved + removed.pruneCandidatesRemoved > 0 {
                self.logger.info("retention", metadata: [
                    "jobs": "\(removed.jobsRemoved)", "pruned_devices": "\(removed.auditRowsRemoved)",
                    "prune_candidates": "\(removed.pruneCandidatesRemoved)",
                ])
            }
        }
        await maintenanceStep("pruning") { try await self.prunePass() }
        await maintenanceStep("backlog metrics") {
            let backlog = try await self.store.backlog()
            self.metrics.backlogTokens.record(backlog.reduce(0) { $0 + $1.tokens })
            self.metrics.oldestJobAge.record(backlog.map(\.oldestAgeSeconds).max() ?? 0)
        }
    }

    /// Runs one maintenance step; its failure is logged (a database outage once, for all loops) and ends
    /// only this step.
    func maintenanceStep(_ name: String, _ step: () async throws -> Void) async {
        // A step's success proves nothing about writes (most of them read, and a standby answers reads), so
        // only the claim, the heartbeat and the result writer report the database available again.
        do {
            try await step()
        } catch {
            if Task.isCancelled { return }
            if !databaseFailed(error) {
                logger.warning("maintenance step failed; the others still run", metadata: [
                    "step": "\(name)", "error": "\(LoggableError.describe(error))",
                ])
            }
        }
    }

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

    func samplePools() {
        Task {
            let pools = await registry.activePools()
            var streams = 0, open = 0, goaways = 0, reconnects = 0
            for (_, _, pool) in pools {
                let stats = pool.statistics
                streams += stats.streamsInFlight
                open += stats.connectionsOpen
                goaways += stats.goAwaysReceived
                reconnects += stats.reconnects
            }
            metrics.samplePools(streams: streams, connections: open, goaways: goaways, reconnects: reconnects)
        }
    }
}
