import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

/// Each maintenance step fails alone: a worker whose app reload fails every pass still runs the leader's
/// queue upkeep and retention.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(2)))
    struct MaintenanceIsolationTests {
        @Test func aFailingAppReloadSkipsNeitherQueueUpkeepNorRetention() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                // The worker may no longer read one column the app reload reads (and nothing else does).
                try await fleet.db.exec("REVOKE SELECT ON push.apps FROM pgpush_worker")
                try await fleet.db.exec("""
                    GRANT SELECT (id, topic, environment, team_id, key_id, private_key_path, certificate_path, rate_limit,
                                  paused_reason, paused_at, fcm_project_id, fcm_service_account_path) ON push.apps TO pgpush_worker
                    """)
                let old = try await fleet.enqueue(", tokens => ARRAY['\(TestTokens.token(1))']")
                try await fleet.db.exec("UPDATE push.jobs SET state = 'done', finished_at = now() - interval '40 days' WHERE id = \(old)")
                let stuck = try await fleet.enqueue(", tokens => ARRAY['\(TestTokens.token(2))']")
                try await fleet.db.exec("UPDATE push.jobs SET state = 'running', started_at = now() WHERE id = \(stuck)")

                let login = try await fleet.db.createLogin(memberOf: "pgpush_worker")
                let worker = try fleet.startWorker(databaseUser: login)
                defer { Task { await worker.stop() } }
                let deadline = ContinuousClock.now + .seconds(30)
                while ContinuousClock.now < deadline {
                    let removed = try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(old)") == 0
                    let finished = try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(stuck) AND state <> 'running'") == 1
                    if removed && finished { break }
                    try await Task.sleep(for: .milliseconds(200))
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(old)") == 0, "retention ran: \(worker.log.suffix(1500))")
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(stuck) AND state <> 'running'") == 1,
                        "queue upkeep finished the job with nothing left to send")
                #expect(worker.log.contains("maintenance task failed"), "\(worker.log.suffix(1500))")
                #expect(worker.log.contains("app reload"))
                worker.signal(SIGTERM)
                #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
            }
        }

        /// Queue upkeep is five tasks, not one transaction: one failing statement of it (the answer window's
        /// DELETE) leaves drained jobs finished and dead workers forgotten.
        @Test func aFailingQueueUpkeepTaskStopsNoneOfTheOthers() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.db.exec("REVOKE DELETE ON push.app_answer_window FROM pgpush_worker")
                let stuck = try await fleet.enqueue(", tokens => ARRAY['\(TestTokens.token(1))']")
                try await fleet.db.exec("UPDATE push.jobs SET state = 'running', started_at = now() WHERE id = \(stuck)")
                try await fleet.db.exec("INSERT INTO push.workers (id, hostname, pid, heartbeat_at) VALUES ('gone', 'h', 1, now() - interval '1 hour')")

                let login = try await fleet.db.createLogin(memberOf: "pgpush_worker")
                let worker = try fleet.startWorker(databaseUser: login)
                defer { Task { await worker.stop() } }
                let finished: PostgresQuery = "SELECT count(*) FROM push.jobs WHERE id = \(stuck) AND state = 'done'"
                let forgotten: PostgresQuery = "SELECT count(*) FROM push.workers WHERE id = 'gone'"
                let deadline = ContinuousClock.now + .seconds(30)
                while ContinuousClock.now < deadline {
                    if try await fleet.count(finished) == 1, try await fleet.count(forgotten) == 0,
                       worker.log.contains("answer window") { break }
                    try await Task.sleep(for: .milliseconds(200))
                }
                #expect(try await fleet.count(finished) == 1, "drained jobs: \(worker.log.suffix(1500))")
                #expect(try await fleet.count(forgotten) == 0, "dead workers")
                #expect(worker.log.contains("maintenance task failed"), "\(worker.log.suffix(1500))")
                #expect(worker.log.contains("answer window"))
                worker.signal(SIGTERM)
                #expect(await worker.waitForExit(timeout: .seconds(30)) == 0)
            }
        }
    }
}
