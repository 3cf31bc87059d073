import Foundation
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

@Suite(.database, .timeLimit(.minutes(3)))
struct ProducerAPITests {
    @Test func enqueueStoresOneJobRowWithDefaults() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let id = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"hi"}}')"#)
            let rows = try await db.rows("""
                SELECT push_type, apns_priority::int, state, priority, tokens IS NULL, user_ids IS NULL, tags IS NULL,
                       send_at <= now(), expires_at IS NULL
                  FROM push.jobs WHERE id = \(id)
                """)
            for try await (type, apnsPriority, state, priority, noTokens, noUsers, noTags, due, noExpiry)
                in rows.decode((String, Int, String, Int, Bool, Bool, Bool, Bool, Bool).self) {
                #expect(type == "alert")
                #expect(apnsPriority == 10)
                #expect(state == "queued")
                #expect(priority == 0)
                #expect(noTokens && noUsers && noTags && due && noExpiry)
            }
            let backgroundJob = try await db.scalar(
                #"SELECT push.enqueue('app', '{"aps":{"content-available":1}}', push_type => 'background')"#)
            let background = try await db.scalar("SELECT apns_priority::int8 FROM push.jobs WHERE id = \(backgroundJob)")
            #expect(background == 5)
        }
    }

    @Test func idempotencyKeyReturnsTheExistingJobPerApp() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let first = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', idempotency_key => 'launch-1')"#)
            let again = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{"badge":2}}', idempotency_key => 'launch-1')"#)
            let otherApp = try await db.scalar(#"SELECT push.enqueue('b', '{"aps":{}}', idempotency_key => 'launch-1')"#)
            #expect(first == again)
            #expect(otherApp != first)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 2)
        }
    }

    @Test func concurrentProducersWithOneIdempotencyKeyStartOneBroadcast() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let ids = try await withThrowingTaskGroup(of: Int64.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', idempotency_key => 'race')"#)
                    }
                }
                return try await group.reduce(into: Set<Int64>()) { $0.insert($1) }
            }
            #expect(ids.count == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 1)
        }
    }

    @Test func tokensAreNormalisedAndDeduplicated() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let upper = String(repeating: "AB", count: 32)
            let lower = upper.lowercased()
            let id = try await db.scalar("SELECT push.enqueue('a', '{\"aps\":{}}', tokens => ARRAY[\(upper), \(lower)])")
            let rows = try await db.rows("SELECT tokens FROM push.jobs WHERE id = \(id)")
            for try await tokens in rows.decode([String].self) {
                #expect(tokens == [lower])
            }
        }
    }

    @Test func plainInsertIsValidAndFilledInLikeEnqueue() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let id = try await db.scalar(#"""
                INSERT INTO push.jobs (app_id, payload, user_ids, priority) VALUES ('a', '{"aps":{"alert":"x"}}', '{u1}', 5)
                RETURNING id
                """#)
            #expect(try await db.scalar("SELECT apns_priority::int8 FROM push.jobs WHERE id = \(id) AND state = 'queued'") == 10)
            // Producers cannot smuggle progress in through a plain INSERT.
            let forged = try await db.scalar(#"""
                INSERT INTO push.jobs (app_id, payload, state, delivered) VALUES ('a', '{"aps":{}}', 'done', 99) RETURNING id
                """#)
            #expect(try await db.scalar("SELECT delivered FROM push.jobs WHERE id = \(forged) AND state = 'queued'") == 0)
        }
    }

    @Test func registerDeviceUpsertsBumpsAndReplaces() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let old = TestTokens.token(1)
            let new = TestTokens.token(2)
            try await db.exec("SELECT push.register_device('a', \(old.uppercased()), user_id => 'u1', tags => '{news}')")
            let firstMicros = try await db.scalar("SELECT (extract(epoch FROM registered_at) * 1e6)::int8 FROM push.devices WHERE token = \(old)")
            try await Task.sleep(for: .milliseconds(20))
            try await db.exec("SELECT push.register_device('a', \(old), user_id => 'u2', tags => '{sports}')")
            let secondMicros = try await db.scalar("SELECT (extract(epoch FROM registered_at) * 1e6)::int8 FROM push.devices WHERE token = \(old)")
            #expect(secondMicros > firstMicros)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE user_id = 'u2' AND tags = '{sports}'") == 1)

            try await db.exec("SELECT push.register_device('a', \(new), user_id => 'u2', replaces => \(old))")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(old)") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(new)") == 1)
        }
    }

    @Test func registerDeviceRejectsBadInput() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for (query, expected) in [
                ("SELECT push.register_device('a', 'nothex')", "token is not a valid device token"),
                ("SELECT push.register_device('ghost', '\(TestTokens.token(1))')", "unknown app_id: ghost"),
                ("SELECT push.register_device('a', '\(TestTokens.token(1))', replaces => 'zz')", "replaces is not a valid device token"),
                // Past the bound, the field is named; PostgreSQL's own error would name devices_by_user's size limit.
                ("SELECT push.register_device('a', '\(TestTokens.token(1))', user_id => repeat('😀', 700))",
                 "user_id is 700 characters long"),
                ("SELECT push.register_device('a', '\(TestTokens.token(1))', tags => ARRAY['ok', repeat('😀', 257)])",
                 "tags holds a tag longer than 256 characters"),
            ] as [(String, String)] {
                var message: String?
                do { try await db.exec(PostgresQuery(unsafeSQL: query)) } catch { message = serverMessage(of: error) }
                #expect(message?.contains(expected) == true, "\(query): \(message ?? "accepted")")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }

    /// The longest user id and tag allowed, in four-byte characters, fit the indexes that find devices by them.
    @Test func registerDeviceTakesTheLongestUserIDAndTagInAnyScript() async throws {
        try await TestDatabase.with { db in
            try await db.createApp(String(repeating: "a", count: 128))
            try await db.exec(PostgresQuery(unsafeSQL: """
                SELECT push.register_device(repeat('a', 128), '\(TestTokens.token(1))', user_id => repeat('😀', 256),
                                            tags => ARRAY[repeat('😀', 256), repeat('字', 256)])
                """))
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE user_id = repeat('😀', 256)") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE tags @> ARRAY[repeat('字', 256)]") == 1)
        }
    }

    @Test func cancelStopsAQueuedJobOnce() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let id = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let rows = try await db.rows("SELECT push.cancel(\(id)), push.cancel(\(id))")
            for try await (first, second) in rows.decode((Bool, Bool).self) {
                #expect(first == true)
                #expect(second == false)
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.job_progress WHERE job_id = \(id) AND state = 'cancelled' AND pending = 0") == 1)
            var message: String?
            do { try await db.exec("SELECT push.cancel(424242)") } catch { message = serverMessage(of: error) }
            #expect(message == "unknown job_id: 424242")
        }
    }

    @Test func audienceSizesShowInJobProgress() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for i in 0..<6 {
                let tags = i % 2 == 0 ? "{even}" : "{odd}"
                try await db.exec(
                    "SELECT push.register_device('a', \(TestTokens.token(i)), user_id => \("u\(i % 3)"), tags => \(tags)::text[])")
            }
            let all = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let users = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', user_ids => '{u0,u1}')"#)
            let tags = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', tags => '{even}')"#)
            let explicit = try await db.scalar("SELECT push.enqueue('a', '{\"aps\":{}}', tokens => ARRAY[\(TestTokens.token(100))])")
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(all)") == 6)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(users)") == 4)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(tags)") == 3)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(explicit)") == 1)
            #expect(try await db.scalar("SELECT backlog_tokens FROM push.queue_backlog WHERE app_id = 'a'") == 14)
        }
    }

    @Test func insertingJobsNotifiesOncePerStatement() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.client.withConnection { listener in
                try await listener.listen(on: "pgpush_jobs") { notifications in
                    try await db.exec(#"""
                        INSERT INTO push.jobs (app_id, payload) SELECT 'a', '{"aps":{}}' FROM generate_series(1, 5)
                        """#)
                    // Notifications arrive in commit order, so everything before the marker came from the insert.
                    try await db.exec("SELECT pg_notify('pgpush_jobs', 'marker')")
                    var fromInsert = 0
                    for try await notification in notifications {
                        if notification.payload == "marker" { break }
                        fromInsert += 1
                    }
                    #expect(fromInsert == 1)
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 5)
        }
    }

    @Test func broadcastToManyDevicesWritesOneRow() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("""
                INSERT INTO push.devices (app_id, token)
                SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 100000) g
                """)
            let before = try await db.scalar("SELECT (SELECT count(*) FROM push.chunks) + (SELECT count(*) FROM push.deliveries)")
            let id = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{"alert":"all"}}')"#)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 1)
            #expect(try await db.scalar("SELECT (SELECT count(*) FROM push.chunks) + (SELECT count(*) FROM push.deliveries)") == before)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(id)") == 100000)
        }
    }
}
