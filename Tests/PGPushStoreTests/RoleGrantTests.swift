import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The migrations' roles can do their job and nothing else.
@Suite(.database, .timeLimit(.minutes(3)))
struct RoleGrantTests {
    static func attempt(_ connection: PostgresConnection, _ sql: String, db: TestDatabase) async -> String? {
        do {
            _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: db.logger).collect()
            return nil
        } catch {
            return serverMessage(of: error) ?? "\(error)"
        }
    }

    @Test func producerCanEnqueueRegisterCancelAndReadViewsOnly() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let producer = try await db.connect(asMemberOf: "pgpush_producer")
            defer { Task { try? await producer.close() } }
            let token = TestTokens.token(7)
            let allowed = [
                "SELECT push.register_device('a', '\(token)', user_id => 'u1')",
                #"SELECT push.enqueue('a', '{"aps":{}}', user_ids => '{u1}')"#,
                #"INSERT INTO push.jobs (app_id, payload) VALUES ('a', '{"aps":{}}') RETURNING id"#,
                "SELECT push.cancel((SELECT max(job_id) FROM push.job_progress))",
                "SELECT * FROM push.job_progress",
                "SELECT * FROM push.delivery_stats",
                "SELECT * FROM push.queue_backlog",
                "SELECT * FROM push.job_latency",
            ]
            for sql in allowed {
                let failure = await Self.attempt(producer, sql, db: db)
                #expect(failure == nil, "producer was refused: \(sql): \(failure ?? "")")
            }
            let refused = [
                "SELECT * FROM push.devices",
                "SELECT payload FROM push.jobs",
                "SELECT * FROM push.apps",
                "SELECT * FROM push.deliveries",
                "SELECT * FROM push.provider_tokens",
                "UPDATE push.jobs SET state = 'done'",
                "DELETE FROM push.jobs",
                "DELETE FROM push.devices",
                "INSERT INTO push.devices (app_id, token) VALUES ('a', '\(TestTokens.token(9))')",
                "INSERT INTO push.apps (id, topic, certificate_path) VALUES ('evil', 't', '/etc/shadow')",
                "UPDATE push.apps SET private_key_path = '/etc/shadow'",
                "INSERT INTO push.deliveries (job_id, app_id, token, status, attempt, sent_at) VALUES (1, 'a', 't', 200, 1, now())",
                "SELECT push.ensure_delivery_partitions(1)",
                "SELECT * FROM push.chunks",
            ]
            for sql in refused {
                let failure = await Self.attempt(producer, sql, db: db)
                #expect(failure?.contains("permission denied") == true, "producer was allowed: \(sql)")
            }
        }
    }

    @Test func readerSeesTheViewsOnly() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let reader = try await db.connect(asMemberOf: "pgpush_reader")
            defer { Task { try? await reader.close() } }
            for sql in ["SELECT * FROM push.job_progress", "SELECT * FROM push.delivery_stats", "SELECT * FROM push.queue_backlog"] {
                #expect(await Self.attempt(reader, sql, db: db) == nil, "reader was refused: \(sql)")
            }
            for sql in [
                #"SELECT push.enqueue('a', '{"aps":{}}')"#,
                "SELECT push.register_device('a', '\(TestTokens.token(1))')",
                "SELECT * FROM push.jobs",
                "SELECT * FROM push.devices",
                "SELECT * FROM push.deliveries",
                "SELECT push.cancel(1)",
            ] {
                let failure = await Self.attempt(reader, sql, db: db)
                #expect(failure?.contains("permission denied") == true, "reader was allowed: \(sql)")
            }
        }
    }

    @Test func workerRunsTheQueueButCannotEditAppsOrEnqueue() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let worker = try await db.connect(asMemberOf: "pgpush_worker")
            defer { Task { try? await worker.close() } }
            for sql in [
                "SELECT id, topic, private_key_path FROM push.apps",
                "UPDATE push.apps SET paused_reason = 'BadTopic', paused_at = now() WHERE id = 'a'",
                "SELECT * FROM push.chunks",
                "INSERT INTO push.deliveries (job_id, app_id, token, status, attempt, sent_at) VALUES (1, 'a', 't', 200, 1, now())",
                "SELECT push.ensure_delivery_partitions(1)",
                "DELETE FROM push.devices WHERE false",
                // The job columns it owns, and retention's delete.
                """
                UPDATE push.jobs SET state = 'done', total = 1, delivered = 1, failed = 0, expired = 0, pruned = 0, answered = 1,
                       bad_device_tokens = 0, started_at = now(), first_sent_at = now(), finished_at = now(), failure_reason = NULL
                 WHERE false
                """,
                "DELETE FROM push.jobs WHERE false",
                "DELETE FROM push.pruned_devices WHERE false",
            ] {
                #expect(await Self.attempt(worker, sql, db: db) == nil, "worker was refused: \(sql)")
            }
            for sql in [
                "UPDATE push.apps SET private_key_path = '/etc/shadow'",
                "INSERT INTO push.apps (id, topic, certificate_path) VALUES ('evil', 't', '/x')",
                #"INSERT INTO push.jobs (app_id, payload) VALUES ('a', '{"aps":{}}')"#,
                "DROP TABLE push.deliveries",
                // A job's content is the producer's: the worker cannot rewrite what it sends, or to whom.
                #"UPDATE push.jobs SET payload = '{"aps":{"alert":"phish"}}'"#,
                "UPDATE push.jobs SET tokens = NULL, user_ids = NULL, tags = NULL",
                "UPDATE push.jobs SET app_id = 'a'",
                "UPDATE push.jobs SET push_type = 'voip'",
                "UPDATE push.jobs SET priority = 10",
                "UPDATE push.jobs SET send_at = now(), expires_at = NULL",
                "UPDATE push.jobs SET collapse_id = 'x', idempotency_key = 'y', apns_priority = 10",
                "UPDATE push.apps SET topic = 'com.example.other'",
                "SELECT push.grant_app('x', 'a')",
            ] {
                let failure = await Self.attempt(worker, sql, db: db)
                #expect(failure?.contains("permission denied") == true || failure?.contains("must be owner") == true,
                        "worker was allowed: \(sql)")
            }
        }
    }
}
