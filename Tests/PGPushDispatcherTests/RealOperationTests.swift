import Foundation
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// The failure cases outside the first tests, as a user meets them: a job-level APNs error beside a healthy
/// job, a worker restarted under the same id, and a cancel while a dead worker holds the job's chunks.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct RealOperationTests {
        @Test func aJobLevelErrorFailsTheJobAndTheAppsOtherJobsGoOn() async throws {
            try await Fleet.with(configure: { $0.disallowedTopics = ["com.example.app.voip"] }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(3000)
                let voip = try await fleet.enqueue(", push_type => 'voip'")
                let alert = try await fleet.enqueue()
                let worker = try fleet.startWorker()
                #expect(try await fleet.waitForJob(voip, timeout: .seconds(120)) == "failed", "\(worker.log.suffix(1500))")
                #expect(try await fleet.waitForJob(alert, timeout: .seconds(120)) == "done", "\(worker.log.suffix(1500))")
                await worker.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 0, "the app is not paused")
                #expect(try await fleet.count("SELECT count(*) FROM push.job_progress WHERE job_id = \(voip) AND failure_reason = 'TopicDisallowed'") == 1)
                // Every token of the failed job has one outcome with the reason; only a handful were sent.
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(voip) AND reason = 'TopicDisallowed'") == 3000)
                let sent = try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(voip) AND status = 400")
                #expect(sent >= 3 && sent <= 48, "requests the VoIP job sent before it failed: \(sent)")
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(alert)") == 3000)
            }
        }

        @Test func aWorkerRestartedUnderTheSameIdLetsItsOldLeasesBeRescued() async throws {
            try await Fleet.with(configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(8000)
                let job = try await fleet.enqueue()
                let flags = ["--lease", "5", "--heartbeat-interval", "1"]
                let first = try fleet.startWorker(flags, id: "pod-0")
                try await SchedulingTests.waitUntilDelivered(fleet, job: job, atLeast: 1000)
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE locked_by IS NOT NULL") > 0)
                first.signal(SIGKILL)
                _ = await first.waitForExit(timeout: .seconds(10))
                let restarted = ContinuousClock.now
                let second = try fleet.startWorker(flags, id: "pod-0")
                // Within the lease plus 60 s of the restart.
                #expect(try await fleet.waitForJob(job, timeout: .seconds(65)) == "done", "\(second.log.suffix(1500))")
                #expect(ContinuousClock.now - restarted < .seconds(65))
                await second.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 8000)
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 8000)
                #expect(try await fleet.count("SELECT count(*) FROM push.workers WHERE id = 'pod-0'") <= 1, "the id stays readable, one row")
            }
        }

        @Test func aCancelWhileADeadWorkerHoldsTheChunksSendsNothingMore() async throws {
            try await Fleet.with(configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(10_000)
                let job = try await fleet.enqueue()
                let flags = ["--lease", "3", "--heartbeat-interval", "1"]
                let crashed = try fleet.startWorker(flags, id: "crashed")
                try await SchedulingTests.waitUntilDelivered(fleet, job: job, atLeast: 500)
                crashed.signal(SIGKILL)
                _ = await crashed.waitForExit(timeout: .seconds(10))
                // What the dead worker had in flight still gets its (delayed) answer; that is not "after".
                try await Task.sleep(for: .milliseconds(500))
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE locked_by IS NOT NULL") > 0, "the dead worker held chunks")
                #expect(try await fleet.count("SELECT push.cancel(\(job))::int::int8") == 1)
                let acceptedAtCancel = fleet.simulator.ledger.acceptedCount
                let rescuer = try fleet.startWorker(flags, id: "rescuer")
                // Past the dead worker's lease, maintenance drops the chunks; with none left nothing can be sent.
                try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                    try await fleet.count("SELECT count(*) FROM push.chunks WHERE job_id = \(job)") == 0
                }
                #expect(fleet.simulator.ledger.acceptedCount == acceptedAtCancel, "notifications sent after the cancel")
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE job_id = \(job)") == 0, "maintenance dropped them")
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'cancelled'") == 1)
                await rescuer.stop()
                // The counts stay true: every recorded outcome is counted once.
                let counted = try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)")
                let recorded = try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status = 200")
                #expect(counted == recorded)
            }
        }
    }
}

extension EndToEndTests.RealOperationTests {
    @Test func theWrongEnvironmentWithOneTokenJobsPausesTheAppAndDeletesNoDevice() async throws {
        try await Fleet.with(configure: { $0.registry.badDeviceTokenByDefault = true }) { fleet in
            try await fleet.createApp()
            // 1,500 users with one device each, and one job per user: the traffic of a transactional backend.
            try await fleet.db.exec("""
                INSERT INTO push.devices (app_id, token, user_id, registered_at)
                SELECT 'app', lpad(to_hex(g), 64, '0'), 'user-' || g, now() - interval '1 day' FROM generate_series(1, 1500) g
                """)
            try await fleet.db.exec("""
                SELECT push.enqueue('app', '{"aps":{"alert":"your order shipped"}}', user_ids => ARRAY['user-' || g])
                  FROM generate_series(1, 1500) g
                """)
            let worker = try fleet.startWorker()
            try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(120)) {
                try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason LIKE 'BadDeviceToken safety valve:%'") == 1
            }
            try await Task.sleep(for: .seconds(3))  // more maintenance passes: still nothing pruned
            await worker.stop()
            #expect(try await fleet.count("SELECT count(*) FROM push.devices") == 1500)
            #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices") == 0)
            #expect(try await fleet.count("SELECT count(*) FROM push.prune_candidates WHERE NOT suppressed AND reason = 'BadDeviceToken'") == 0,
                    "every report the valve judged is kept aside")

            // The operator knows better: the audience is stale. Confirming prunes those devices, audited.
            #expect(try await fleet.count("SELECT push.confirm_stale_audience('app', 'test import')") >= 1000)
            #expect(try await fleet.count("SELECT count(*) FROM push.operator_audit WHERE action = 'confirm_stale_audience' AND app_id = 'app'") == 1)
            #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NULL") == 1, "the valve pause is lifted")
            let pruner = try fleet.startWorker()
            try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                try await fleet.count("SELECT count(*) FROM push.pruned_devices") >= 1000
            }
            await pruner.stop()
        }
    }

    @Test func resumingAfterFixingTheEnvironmentDiscardsTheKeptReports() async throws {
        try await Fleet.with(configure: { $0.registry.badDeviceTokenByDefault = true }) { fleet in
            try await fleet.createApp()
            try await fleet.registerDevices(1200)
            let job = try await fleet.enqueue()
            let worker = try fleet.startWorker()
            _ = try await fleet.waitForJob(job, timeout: .seconds(90))
            try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 1
            }
            try await fleet.db.exec("UPDATE push.apps SET paused_reason = NULL WHERE id = 'app'")
            #expect(try await fleet.count("SELECT count(*) FROM push.prune_candidates") == 0)
            try await Task.sleep(for: .seconds(2))
            await worker.stop()
            #expect(try await fleet.count("SELECT count(*) FROM push.devices") == 1200)
        }
    }

    @Test func anIdleAppsConnectionsAreClosedAndReopenedForItsNextJob() async throws {
        try await Fleet.with { fleet in
            try await fleet.createApp()
            try await fleet.registerDevices(20)
            let first = try await fleet.enqueue()
            let worker = try fleet.startWorker(["--idle-pool-timeout", "2"])
            #expect(try await fleet.waitForJob(first, timeout: .seconds(60)) == "done", "\(worker.log.suffix(1500))")
            #expect(fleet.simulator.statistics.connectionsAccepted > 0)
            try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(20)) {
                fleet.simulator.openConnections == 0
            }
            let accepted = fleet.simulator.statistics.connectionsAccepted
            let second = try await fleet.enqueue()
            #expect(try await fleet.waitForJob(second, timeout: .seconds(60)) == "done", "\(worker.log.suffix(1500))")
            #expect(fleet.simulator.statistics.connectionsAccepted > accepted, "the next job opened the pool again")
            await worker.stop()
            #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE status = 200") == 40)
        }
    }
}
