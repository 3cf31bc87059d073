import Foundation
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Synchronization
import Testing

/// push.job_events (migration 0025): one row per event, written by triggers in the transaction of the change,
/// numbered in commit order, with a NOTIFY, tenancy and retention.
@Suite(.database, .timeLimit(.minutes(3)))
struct JobEventsTests {
    struct Event: Equatable, CustomStringConvertible {
        var app: String
        var job: Int64?
        var event: String
        var description: String { "\(event)(\(app)\(job.map { ", \($0)" } ?? ""))" }
    }

    static func events(_ db: TestDatabase, after id: Int64 = 0) async throws -> [Event] {
        try await db.exec("SELECT app_id, job_id, event FROM push.job_events WHERE id > \(id) ORDER BY id").map { row in
            let (app, job, event) = try row.decode((String, Int64?, String).self)
            return Event(app: app, job: job, event: event)
        }
    }

    static func text(_ db: TestDatabase, _ query: PostgresQuery) async throws -> String? {
        for try await value in try await db.rows(query).decode(String?.self) { return value }
        return nil
    }

    static func newest(_ db: TestDatabase) async throws -> Int64 {
        try await db.scalar("SELECT coalesce(max(id), 0) FROM push.job_events")
    }

    static func run(_ connection: PostgresConnection, _ sql: String, _ db: TestDatabase) async throws {
        _ = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: db.logger).collect()
    }

    static let payload = #"{"aps":{"alert":"hi"}}"#

    // MARK: - What is recorded

    @Test func aJobThatRunsAndEndsRecordsItsStartAndEndWithItsCounts() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let job = try await db.scalar("""
                SELECT push.enqueue('a', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(1)), \(TestTokens.token(2))],
                                    idempotency_key => 'order-1')
                """)
            #expect(try await Self.events(db).isEmpty, "enqueueing is not an event")
            // As the worker's expansion, completions and maintenance move it.
            try await db.exec("UPDATE push.jobs SET state = 'running', total = 2, android_total = 0, started_at = now() WHERE id = \(job)")
            try await db.exec("UPDATE push.jobs SET delivered = 1, answered = 1 WHERE id = \(job)")
            #expect(try await Self.events(db) == [Event(app: "a", job: job, event: "job_started")], "counters alone are no event")
            try await db.exec("""
                UPDATE push.jobs SET delivered = delivered + 1, answered = answered + 1, state = 'done', finished_at = now()
                 WHERE id = \(job)
                """)
            #expect(try await Self.events(db) == [Event(app: "a", job: job, event: "job_started"), Event(app: "a", job: job, event: "job_done")])
            #expect(try await Self.text(db, "SELECT body::text FROM push.job_events WHERE event = 'job_started'")?.contains(#""state": "running""#) == true)
            let done = try await db.scalar("""
                SELECT count(*) FROM push.job_events
                 WHERE event = 'job_done' AND body @> '{"state": "done", "total": 2, "delivered": 2, "failed": 0, "expired": 0,
                                                        "pruned": 0, "cancelled_tokens": 0, "android_total": 0,
                                                        "idempotency_key": "order-1"}'
                   AND NOT body ? 'failure_reason'
                """)
            #expect(done == 1)
            // `at` is taken with the id, at commit: it grows with it.
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events a JOIN push.job_events b ON b.id > a.id WHERE b.at < a.at") == 0)

            // An empty audience: started and done at once, in that order.
            let empty = try await db.scalar("SELECT push.enqueue('a', \(Self.payload)::jsonb, user_ids => '{nobody}')")
            let before = try await Self.newest(db)
            try await db.exec("""
                UPDATE push.jobs SET state = 'done', total = 0, android_total = 0, started_at = now(), finished_at = now() WHERE id = \(empty)
                """)
            #expect(try await Self.events(db, after: before) == [
                Event(app: "a", job: empty, event: "job_started"), Event(app: "a", job: empty, event: "job_done"),
            ])

            // A job-level error: the reason is set first, then the job ends failed.
            let failing = try await db.scalar("SELECT push.enqueue('a', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(3))])")
            try await db.exec("UPDATE push.jobs SET state = 'running', total = 1, started_at = now() WHERE id = \(failing)")
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            try await store.failJob(failing, reason: "BadCollapseId")
            try await db.exec("UPDATE push.jobs SET failed = 1, state = 'failed', finished_at = now() WHERE id = \(failing)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.job_events
                 WHERE job_id = \(failing) AND event = 'job_failed' AND body @> '{"failure_reason": "BadCollapseId", "failed": 1}'
                """) == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events_pending") == 0, "nothing is left pending after a commit")
        }
    }

    @Test func cancelledAndReplacedJobsRecordTheirEndWithTheCountsTheCancelLeaves() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for index in 1...3 { try await db.exec("SELECT push.register_device('a', \(TestTokens.token(index)))") }
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            let job = try await db.scalar("SELECT push.enqueue('a', \(Self.payload)::jsonb)")
            // Expanded by a worker (a broadcast: key-range chunks, unclaimed), then cancelled by the producer.
            #expect(try await store.expandNextDueJob(chunkSize: 1000)?.jobID == job)
            #expect(try await db.scalar("SELECT push.cancel(\(job))::int") == 1)
            #expect(try await Self.events(db) == [Event(app: "a", job: job, event: "job_started"), Event(app: "a", job: job, event: "job_cancelled")])
            // The body is the job as the cancel's transaction left it: its unsent tokens moved to cancelled_tokens.
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.job_events
                 WHERE event = 'job_cancelled' AND body @> '{"state": "cancelled", "total": 0, "cancelled_tokens": 3}'
                """) == 1)

            // A pending job replaced by key (migration 0024): a cancel whose replaced_by is set.
            let first = try await db.scalar("SELECT push.enqueue('a', \(Self.payload)::jsonb, replace_key => 'chat-42')")
            let before = try await Self.newest(db)
            let second = try await db.scalar("SELECT push.enqueue('a', \(Self.payload)::jsonb, replace_key => 'chat-42')")
            #expect(try await Self.events(db, after: before) == [Event(app: "a", job: first, event: "job_replaced")])
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.job_events WHERE event = 'job_replaced' AND (body->>'replaced_by')::int8 = \(second)
                """) == 1)
        }
    }

    @Test func pausesAndResumesRecordTheReasonAndTheProviderItNames() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            #expect(try await store.pauseApp("a", reason: "InvalidProviderToken"))
            #expect(!(try await store.pauseApp("a", reason: "BadTopic")), "an app paused already keeps its reason: no event")
            try await db.exec("UPDATE push.apps SET paused_reason = NULL, paused_at = NULL WHERE id = 'a'")
            #expect(try await store.pauseApp("a", reason: "THIRD_PARTY_AUTH_ERROR"))
            try await db.exec("UPDATE push.apps SET paused_reason = 'maintenance window', paused_at = now() WHERE id = 'a'")
            try await db.exec("UPDATE push.apps SET paused_reason = NULL, paused_at = NULL WHERE id = 'a'")
            try await db.exec("UPDATE push.apps SET rate_limit = 10 WHERE id = 'a'")
            let rows = try await db.exec("""
                SELECT event, body->>'reason', body->>'provider', job_id FROM push.job_events ORDER BY id
                """).map { try $0.decode((String, String?, String?, Int64?).self) }
            let expected: [(String, String?, String?)] = [
                ("app_paused", "InvalidProviderToken", "apns"), ("app_resumed", "InvalidProviderToken", "apns"),
                ("app_paused", "THIRD_PARTY_AUTH_ERROR", "fcm"), ("app_paused", "maintenance window", nil),
                ("app_resumed", "maintenance window", nil),
            ]
            #expect(rows.count == expected.count, "\(rows)")
            for (row, want) in zip(rows, expected) {
                #expect(row.0 == want.0 && row.1 == want.1 && row.2 == want.2, "\(row) is not \(want)")
                #expect(row.3 == nil)
            }
            // The provider, as far as the reason's text tells it.
            for (reason, provider) in [
                ("TLSCertificateExpired: APNs refused the client certificate as expired", "apns"),
                ("credential: private_key_path /k/AuthKey.p8 is not a usable P-256 .p8 key", "apns"),
                ("credential: fcm_service_account_path sa.json is not a usable service-account file", "fcm"),
                ("UNAUTHENTICATED: FCM refused a freshly exchanged access token", "fcm"),
                ("PERMISSION_DENIED", "fcm"),
                ("BadDeviceToken safety valve: 40% of 1000 answers", nil),
                ("paused from the dashboard: deploy", nil),
            ] as [(String, String?)] {
                #expect(try await Self.text(db, "SELECT push.pause_provider(\(reason))") == provider, "\(reason)")
            }
        }
    }

    @Test func aPruningStatementRecordsOneEventPerAppWithEveryTokenInFull() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let tokens = (1...3).map { TestTokens.token($0) }
            let fcm = "dXyZ0123456789abcdEFGH:APA91bF1rst_Registration-Token"
            // The pruner's own statement: 410 reports deleted and audited.
            for (app, token) in [("a", tokens[0]), ("a", tokens[1]), ("b", tokens[2])] {
                try await db.exec("SELECT push.register_device(\(app), \(token), user_id => 'u-' || \(token))")
            }
            let job = try await db.scalar("SELECT push.enqueue('a', \(Self.payload)::jsonb, tokens => ARRAY[\(tokens[0])])")
            try await db.exec("""
                INSERT INTO push.prune_candidates (app_id, token, job_id, status, reason)
                VALUES ('a', \(tokens[0]), \(job), 410, 'Unregistered'), ('a', \(tokens[1]), \(job), 410, 'Unregistered'),
                       ('b', \(tokens[2]), \(job), 410, 'Unregistered')
                """)
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            #expect(try await store.prune(minimumAnswers: 1000).count == 3)
            #expect(try await Self.events(db) == [Event(app: "a", job: nil, event: "devices_pruned"), Event(app: "b", job: nil, event: "devices_pruned")])
            let devices = try await Self.text(db, "SELECT body::text FROM push.job_events WHERE app_id = 'a'") ?? ""
            #expect(try await db.scalar("""
                SELECT jsonb_array_length(body->'devices') FROM push.job_events WHERE app_id = 'a'
                """) == 2)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.job_events
                 WHERE app_id = 'a' AND body->'devices' @> jsonb_build_array(
                        jsonb_build_object('token', \(tokens[0])::text, 'reason', 'Unregistered', 'job_id', \(job)::int8, 'user_id', 'u-' || \(tokens[0])),
                        jsonb_build_object('token', \(tokens[1])::text, 'reason', 'Unregistered', 'job_id', \(job)::int8))
                """) == 1, "\(devices)")

            // Any insert, an operator's too; a statement that inserts nothing records nothing.
            let before = try await Self.newest(db)
            try await db.exec("INSERT INTO push.pruned_devices (app_id, token, reason) SELECT 'a', 't', 'x' WHERE false")
            try await db.exec("INSERT INTO push.pruned_devices (app_id, token, reason) VALUES ('b', \(fcm), 'UNREGISTERED')")
            #expect(try await Self.events(db, after: before) == [Event(app: "b", job: nil, event: "devices_pruned")])
            #expect(try await Self.text(db, "SELECT body->'devices'->0->>'token' FROM push.job_events WHERE id > \(before)") == fcm)
        }
    }

    @Test func aRolledBackChangeRecordsNothingAndASavepointKeepsTheRest() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let connection = try await db.connect(as: db.url.username)
            defer { Task { try? await connection.close() } }
            try await Self.run(connection, "BEGIN", db)
            try await Self.run(connection, "UPDATE push.apps SET paused_reason = 'x' WHERE id = 'a'", db)
            try await Self.run(connection, "ROLLBACK", db)
            #expect(try await Self.events(db).isEmpty)

            // The savepoint held the transaction's first event, the one that writes them all at commit.
            try await Self.run(connection, "BEGIN", db)
            try await Self.run(connection, "SAVEPOINT s", db)
            try await Self.run(connection, "UPDATE push.apps SET paused_reason = 'x' WHERE id = 'a'", db)
            try await Self.run(connection, "ROLLBACK TO SAVEPOINT s", db)
            try await Self.run(connection, "UPDATE push.apps SET paused_reason = 'y' WHERE id = 'b'", db)
            try await Self.run(connection, "UPDATE push.apps SET paused_reason = 'z' WHERE id = 'a'", db)
            try await Self.run(connection, "COMMIT", db)
            #expect(try await Self.events(db) == [Event(app: "b", job: nil, event: "app_paused"), Event(app: "a", job: nil, event: "app_paused")])

            // Events written after an early flush (SET CONSTRAINTS ALL IMMEDIATE) are written too.
            try await Self.run(connection, "BEGIN", db)
            try await Self.run(connection, "UPDATE push.apps SET paused_reason = NULL WHERE id = 'a'", db)
            try await Self.run(connection, "SET CONSTRAINTS ALL IMMEDIATE", db)
            try await Self.run(connection, "UPDATE push.apps SET paused_reason = NULL WHERE id = 'b'", db)
            try await Self.run(connection, "COMMIT", db)
            #expect(try await Self.events(db).suffix(2) == [Event(app: "a", job: nil, event: "app_resumed"), Event(app: "b", job: nil, event: "app_resumed")])
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events_pending") == 0)
        }
    }

    // MARK: - NOTIFY

    /// Every notification on pgpush_job_events up to `marker`, which is sent last.
    nonisolated(nonsending) static func notifications(
        until marker: String, from received: inout PostgresNotificationSequence.AsyncIterator, db: TestDatabase
    ) async throws -> [String] {
        try await db.exec("SELECT pg_notify(\(QueueStore.jobEventsChannel), \(marker))")
        var payloads: [String] = []
        while let notification = try await received.next(isolation: #isolation), notification.payload != marker {
            payloads.append(notification.payload)
        }
        return payloads
    }

    @Test func aTransactionThatWritesEventsWakesListenersOnceWithItsHighestId() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let listener = try await db.connect(as: db.url.username)
            defer { Task { try? await listener.close() } }
            try await listener.listen(on: QueueStore.jobEventsChannel) { notifications in
                var received = notifications.makeAsyncIterator()
                try await db.exec("UPDATE push.apps SET paused_reason = 'x' WHERE id = 'a'")
                #expect(try await Self.notifications(until: "m1", from: &received, db: db) == ["\(try await Self.newest(db))"])

                // Three events (two statements) in one transaction: one wake-up, at the commit.
                try await db.client.withTransaction(logger: db.logger) { connection in
                    try await Self.run(connection, "UPDATE push.apps SET paused_reason = NULL", db)
                    try await Self.run(connection, "INSERT INTO push.pruned_devices (app_id, token, reason) VALUES ('b', 't', 'Stale')", db)
                }
                let newest = try await Self.newest(db)
                #expect(try await Self.events(db, after: newest - 2).count == 2)
                #expect(try await Self.notifications(until: "m2", from: &received, db: db) == ["\(newest)"])

                // Nothing for a change that records no event.
                try await db.exec("UPDATE push.apps SET rate_limit = 5")
                #expect(try await Self.notifications(until: "m3", from: &received, db: db) == [])
            }
        }
    }

    // MARK: - Commit order

    @Test func idsFollowTheCommitsNotTheChanges() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let first = try await db.connect(as: db.url.username)
            let second = try await db.connect(as: db.url.username)
            defer { Task { try? await first.close(); try? await second.close() } }
            // The first transaction changes first and commits last: its event comes after the other's.
            try await Self.run(first, "BEGIN", db)
            try await Self.run(first, "UPDATE push.apps SET paused_reason = 'first' WHERE id = 'a'", db)
            try await Self.run(second, "BEGIN", db)
            try await Self.run(second, "UPDATE push.apps SET paused_reason = 'second' WHERE id = 'b'", db)
            try await Self.run(second, "COMMIT", db)
            let seen = try await Self.newest(db)
            #expect(try await Self.events(db) == [Event(app: "b", job: nil, event: "app_paused")])
            try await Self.run(first, "COMMIT", db)
            #expect(try await Self.events(db, after: seen) == [Event(app: "a", job: nil, event: "app_paused")],
                    "a reader that has seen \(seen) finds the later commit above it")
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events WHERE id <= \(seen)") == 1)
        }
    }

    @Test func aTransactionThatTookItsIdsFirstHoldsBackTheNextWriterUntilItCommits() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let first = try await db.connect(as: db.url.username)
            let second = try await db.connect(as: db.url.username)
            defer { Task { try? await first.close(); try? await second.close() } }
            // The first transaction takes its ids now (its deferred write runs at SET CONSTRAINTS), and commits last.
            try await Self.run(first, "BEGIN", db)
            try await Self.run(first, "UPDATE push.apps SET paused_reason = 'first' WHERE id = 'a'", db)
            try await Self.run(first, "SET CONSTRAINTS ALL IMMEDIATE", db)
            let committed = SharedCount()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await Self.run(second, "BEGIN", db)
                    try await Self.run(second, "UPDATE push.apps SET paused_reason = 'second' WHERE id = 'b'", db)
                    try await Self.run(second, "COMMIT", db)
                    committed.add()
                }
                // The second commit waits for the lock the first holds...
                try await db.waitUntil("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted", is: 1)
                try await Task.sleep(for: .milliseconds(200))
                let committedEarly = committed.value > 0
                #expect(!committedEarly)
                // ...so a reader sees neither event, not the second's id above a gap the first would fill later.
                #expect(try await Self.events(db).isEmpty)
                try await Self.run(first, "COMMIT", db)
                try await group.waitForAll()
            }
            #expect(try await Self.events(db) == [Event(app: "a", job: nil, event: "app_paused"), Event(app: "b", job: nil, event: "app_paused")])
        }
    }

    @Test func aReaderNeverFindsANewEventBelowOneItHasSeen() async throws {
        try await TestDatabase.with { db in
            let writers = 6, rounds = 40
            for writer in 0..<writers { try await db.createApp("app\(writer)") }
            let readerConnection = try await db.connect(as: db.url.username)
            defer { Task { try? await readerConnection.close() } }
            let done = SharedCount()
            let violations = try await withThrowingTaskGroup(of: [String].self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        let connection = try await db.connect(as: db.url.username)
                        defer { Task { try? await connection.close() } }
                        for round in 0..<rounds {
                            try await Self.run(connection, "BEGIN", db)
                            let reason = round % 2 == 0 ? "'r\(round)'" : "NULL"
                            try await Self.run(connection, "UPDATE push.apps SET paused_reason = \(reason) WHERE id = 'app\(writer)'", db)
                            // Transactions of different lengths, so their commits overtake each other.
                            try await Self.run(connection, "SELECT pg_sleep(\(Double((writer * 7 + round * 3) % 5)) / 1000)", db)
                            try await Self.run(connection, "COMMIT", db)
                        }
                        done.add()
                        return []
                    }
                }
                group.addTask {
                    var seen = Set<Int64>()
                    var highest: Int64 = 0
                    var problems: [String] = []
                    while done.value < writers {
                        let ids = try await readerConnection.query("SELECT id FROM push.job_events", logger: db.logger).collect()
                            .map { try $0.decode(Int64.self) }
                        for id in ids where id <= highest && !seen.contains(id) {
                            problems.append("id \(id) appeared after \(highest) had been seen")
                        }
                        seen.formUnion(ids)
                        highest = max(highest, ids.max() ?? 0)
                    }
                    return problems
                }
                var all: [String] = []
                for try await problems in group { all += problems }
                return all
            }
            #expect(violations.isEmpty, "\(violations.prefix(5))")
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events") == Int64(writers * rounds))
        }
    }

    // MARK: - Tenancy and roles

    @Test func aLoginGrantedAnAppReadsOnlyItsEvents() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            try await db.exec("UPDATE push.apps SET paused_reason = 'x'")
            func apps(_ connection: PostgresConnection) async throws -> [String] {
                try await connection.query("SELECT app_id FROM push.job_events ORDER BY id", logger: db.logger).collect()
                    .map { try $0.decode(String.self) }
            }
            let reader = try await db.createLogin(memberOf: "pgpush_reader")
            let producer = try await db.createLogin(memberOf: "pgpush_producer")
            let dashboard = try await db.createLogin(memberOf: "pgpush_dashboard")
            let relay = try await db.createLogin(memberOf: "pgpush_webhook")
            let open = try await db.createLogin(memberOf: "pgpush_reader")
            try await db.exec("SELECT push.grant_app(\(reader), 'a')")
            try await db.exec("SELECT push.grant_app(\(producer), 'b')")
            try await db.exec("SELECT push.grant_app(\(dashboard), 'b')")
            for (user, expected) in [(reader, ["a"]), (producer, ["b"]), (dashboard, ["b"]), (relay, ["a", "b"]), (open, ["a", "b"])] {
                let connection = try await db.connect(as: user)
                #expect(try await apps(connection) == expected, "\(user)")
                for sql in [
                    "INSERT INTO push.job_events (app_id, event) VALUES ('a', 'app_paused')",
                    "UPDATE push.job_events SET body = '{}'",
                    "DELETE FROM push.job_events",
                    "SELECT * FROM push.job_events_pending",
                ] {
                    let failure = await RoleGrantTests.attempt(connection, sql, db: db)
                    #expect(failure?.contains("permission denied") == true, "\(user) was allowed: \(sql)")
                }
                try? await connection.close()
            }
            // The relay keeps its place; a relay granted an app reads only that app's events.
            let relayConnection = try await db.connect(as: relay)
            for sql in [
                "INSERT INTO push.webhook_cursors (name) VALUES ('main')",
                "UPDATE push.webhook_cursors SET last_event_id = 2, updated_at = now() WHERE name = 'main'",
                "SELECT last_event_id FROM push.webhook_cursors",
            ] {
                let failure = await RoleGrantTests.attempt(relayConnection, sql, db: db)
                #expect(failure == nil, "the relay was refused: \(sql): \(failure ?? "")")
            }
            try await db.exec("SELECT push.grant_app(\(relay), 'a')")
            #expect(try await apps(relayConnection) == ["a"])
            try? await relayConnection.close()
            // The worker reads every event, and deletes them for retention only.
            let worker = try await db.connect(asMemberOf: "pgpush_worker")
            #expect(try await apps(worker) == ["a", "b"])
            #expect(await RoleGrantTests.attempt(worker, "DELETE FROM push.job_events WHERE false", db: db) == nil)
            #expect(await RoleGrantTests.attempt(worker, "INSERT INTO push.job_events (app_id, event) VALUES ('a', 'app_paused')", db: db)?
                .contains("permission denied") == true)
            #expect(await RoleGrantTests.attempt(worker, "SELECT * FROM push.webhook_cursors", db: db)?.contains("permission denied") == true)
            try? await worker.close()
        }
    }

    @Test func producersCancellingAndWorkersFinishingRecordEventsWithoutRightsOnTheTables() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let producer = try await db.connect(asMemberOf: "pgpush_producer")
            defer { Task { try? await producer.close() } }
            let rows = try await producer.query("SELECT push.enqueue('a', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(1))])",
                                                logger: db.logger).collect()
            let job = try rows[0].decode(Int64.self)
            let other = try await db.scalar("SELECT push.enqueue('a', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(2))])")
            try await Self.run(producer, "SELECT push.cancel(\(job))", db)
            let worker = try await db.connect(asMemberOf: "pgpush_worker")
            defer { Task { try? await worker.close() } }
            try await Self.run(worker, "UPDATE push.jobs SET state = 'running', total = 1, started_at = now() WHERE id = \(other)", db)
            try await Self.run(worker, "UPDATE push.jobs SET state = 'done', delivered = 1, finished_at = now() WHERE id = \(other)", db)
            try await Self.run(worker, "UPDATE push.apps SET paused_reason = 'BadTopic', paused_at = now() WHERE id = 'a'", db)
            try await Self.run(worker, "INSERT INTO push.pruned_devices (app_id, token, reason) VALUES ('a', '\(TestTokens.token(2))', 'Unregistered')", db)
            #expect(try await Self.events(db).map(\.event) == ["job_cancelled", "job_started", "job_done", "app_paused", "devices_pruned"])
        }
    }

    // MARK: - Retention

    @Test func retentionRemovesTheEventsOlderThanItInBatches() async throws {
        try await TestDatabase.with { db in
            for index in 0..<7 { try await db.createApp("app\(index)") }
            try await db.exec("UPDATE push.apps SET paused_reason = 'x'")
            // Five of the seven events were recorded 40 days ago.
            try await db.exec("""
                UPDATE push.job_events SET at = now() - interval '40 days'
                 WHERE id IN (SELECT id FROM push.job_events ORDER BY id LIMIT 5)
                """)
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            #expect(try await store.removeExpiredEvents(olderThan: .seconds(30 * 86_400), batchSize: 2, maximumBatches: 2) == 4)
            #expect(try await store.removeExpiredEvents(olderThan: .seconds(30 * 86_400), batchSize: 2) == 1)
            #expect(try await store.removeExpiredEvents(olderThan: .seconds(30 * 86_400), batchSize: 2) == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events") == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events WHERE at < now() - interval '30 days'") == 0)

            // As the worker's least-privileged login.
            try await db.exec("UPDATE push.job_events SET at = now() - interval '40 days'")
            let login = try await db.createLogin(memberOf: "pgpush_worker")
            let removed = try await withTestClient(db.urlString(user: login)) { client in
                try await QueueStore(client: client, workerID: "w", logger: db.logger).removeExpiredEvents(olderThan: .seconds(30 * 86_400))
            }
            #expect(removed == 2)
        }
    }
}

/// A count tasks share.
final class SharedCount: Sendable {
    private let count = Atomic<Int>(0)
    var value: Int { count.load(ordering: .sequentiallyConsistent) }
    func add() { count.add(1, ordering: .sequentiallyConsistent) }
}
