import Foundation
import Logging
import PGPushStore
import PostgresNIO

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
                let live = try await store.heartbeat(lease: configuration.lease, liveWindow: configuration.heartbeatInterval * 3)
                health.withLock { $0.databaseAnswered(at: .now) }
                await registry.setLiveWorkers(live)
            } catch {
                if Task.isCancelled { return }
                logger.warning("heartbeat failed", metadata: ["error": "\(LoggableError.describe(error))"])
            }
            try? await Task.sleep(for: configuration.heartbeatInterval)
        }
    }

    /// LISTEN for new jobs; a notification only wakes the claim loop (the poll is the backstop).
    func listenLoop() async {
        var failures = 0
        while !Task.isCancelled {
            do {
                try await store.client.withConnection { connection in
                    try await connection.listen(on: "pgpush_jobs") { notifications in
                        failures = 0
                        for try await _ in notifications {
                            self.expansionWake.yield()
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                failures += 1
                try? await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// LISTEN for cancels: a cancelled job's chunks held here stop at their next token. The claim and the
    /// completion check the job's state too; this makes the stop immediate.
    func cancelListenLoop() async {
        var failures = 0
        while !Task.isCancelled {
            do {
                try await store.client.withConnection { connection in
                    try await connection.listen(on: QueueStore.cancelChannel) { notifications in
                        failures = 0
                        for try await notification in notifications {
                            guard let job = Int64(notification.payload) else { continue }
                            self.verdicts.cancel(job)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                failures += 1
                try? await Task.sleep(for: Self.backoff(failures))
            }
        }
    }

    /// Maintenance (one leader at a time), app reloads, the pruner and metric samples.
    func maintenanceLoop() async {
        while !Task.isCancelled {
            do {
                try await registry.reload()
                await registry.closeIdlePools(idleFor: configuration.idlePoolTimeout)
                let apps = try await store.apps()
                appHealth.sync(pausedInDatabase: Set(apps.values.filter { $0.pausedReason != nil }.map(\.id)))
                metrics.pausedApps.record(apps.values.count { $0.pausedReason != nil })
                let deadAfter = configuration.heartbeatInterval * 6
                _ = try await store.asMaintenanceLeader {
                    _ = try await self.store.maintain(deadWorkerAfter: deadAfter)
                    let removed = try await self.store.removeExpired(olderThan: self.configuration.retention)
                    if removed.jobsRemoved + removed.auditRowsRemoved + removed.pruneCandidatesRemoved > 0 {
                        self.logger.info("retention", metadata: [
                            "jobs": "\(removed.jobsRemoved)", "pruned_devices": "\(removed.auditRowsRemoved)",
                            "prune_candidates": "\(removed.pruneCandidatesRemoved)",
                        ])
                    }
                    try await self.prunePass()
                    let backlog = try await self.store.backlog()
                    self.metrics.backlogTokens.record(backlog.reduce(0) { $0 + $1.tokens })
                    self.metrics.oldestJobAge.record(backlog.map(\.oldestAgeSeconds).max() ?? 0)
                }
                samplePools()
                metrics.heldNotifications.record(scheduler.withLock { $0.held })
            } catch {
                if Task.isCancelled { return }
                logger.warning("maintenance failed", metadata: ["error": "\(LoggableError.describe(error))"])
            }
            try? await Task.sleep(for: configuration.maintenanceInterval)
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
