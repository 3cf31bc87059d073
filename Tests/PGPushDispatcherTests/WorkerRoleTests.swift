import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

/// The worker logged in as a member of pgpush_worker, which may update only the job columns it owns:
/// everything it does (expansion, claims, completions, pruning, pauses, maintenance and retention) still works.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(3)))
    struct WorkerRoleTests {
        @Test func aWorkerWithTheLeastPrivilegedRoleRunsTheWholeQueue() async throws {
            let unregisteredAt = Int64((Date().timeIntervalSince1970 - 3600) * 1000)
            try await Fleet.with(configure: {
                $0.registry.unregisteredPrefixTimestampMilliseconds = unregisteredAt
                $0.allowedTopics = ["com.example.app"]  // app `wrong` gets BadTopic, an app-level error: paused
            }) { fleet in
                try await fleet.createApp()
                try await fleet.createApp("wrong", topic: "com.example.other")
                try await fleet.registerDevices(300)
                try await fleet.registerDevices(5, app: "wrong")
                let dead = "dead" + String(repeating: "1", count: 60)
                try await fleet.db.exec("""
                    INSERT INTO push.devices (app_id, token, user_id, registered_at)
                    VALUES ('app', \(dead), 'u1', now() - interval '1 day'), ('app', 'feed' || repeat('2', 60), 'u2', now())
                    """)
                // A job that finished 40 days ago: retention (30 days by default) removes it.
                try await fleet.db.exec("""
                    INSERT INTO push.jobs (app_id, payload, state, total, delivered, created_at, finished_at)
                    VALUES ('app', '{"aps":{}}', 'done', 1, 1, now() - interval '41 days', now() - interval '40 days')
                    """)
                let broadcast = try await fleet.enqueue()
                let oneUser = try await fleet.enqueue(", user_ids => ARRAY['u2']")
                let wrongTopic = try await fleet.enqueue(app: "wrong")

                let login = try await fleet.db.createLogin(memberOf: "pgpush_worker")
                let worker = try fleet.startWorker(databaseUser: login)
                #expect(try await fleet.waitForJob(broadcast, timeout: .seconds(60)) == "done")
                #expect(try await fleet.waitForJob(oneUser, timeout: .seconds(30)) == "done")
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                    let pruned = try await fleet.count("SELECT count(*) FROM push.devices WHERE token = \(dead)") == 0
                    let removed = try await fleet.count("SELECT count(*) FROM push.jobs WHERE finished_at < now() - interval '30 days'") == 0
                    let paused = try await fleet.count("SELECT count(*) FROM push.apps WHERE id = 'wrong' AND paused_reason IS NOT NULL") == 1
                    return pruned && removed && paused
                }
                await worker.stop()
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(broadcast)") == 301)
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(oneUser)") == 1)
                #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices WHERE token = \(dead)") == 1)
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE finished_at < now() - interval '30 days'") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(wrongTopic) AND state IN ('queued', 'running')") == 1)
                let log = worker.log
                #expect(!log.contains("permission denied"), "the worker was refused something:\n\(log.suffix(4000))")
            }
        }
    }
}
