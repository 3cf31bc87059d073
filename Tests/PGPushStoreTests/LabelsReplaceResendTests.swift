import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

/// Labels, replacing a pending job and resending a job's failures (migration 0024): `push.enqueue(..., labels =>,
/// replace_key =>)`, `push.resend_failed`, and the views' new columns.
@Suite(.database, .timeLimit(.minutes(3)))
struct LabelsReplaceResendTests {
    static let alert = #"'{"aps":{"alert":"x"}}'"#

    /// Expects `statement` to be refused naming `column` (see PerDeviceContentTests).
    static func expectRefused(
        _ db: TestDatabase, _ statement: String, column: String, sqlState: String = "23514", mentioning: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        await PerDeviceContentTests.expectRefused(
            db, statement, column: column, sqlState: sqlState, mentioning: mentioning, sourceLocation: sourceLocation)
    }

    /// Runs `sql` on `connection`, returning its rows.
    @discardableResult
    static func run(_ connection: PostgresConnection, _ sql: PostgresQuery, db: TestDatabase) async throws -> [PostgresRow] {
        try await connection.query(sql, logger: db.logger).collect()
    }

    /// A job's state and replaced_by.
    static func replacement(_ db: TestDatabase, _ job: Int64) async throws -> (state: String, replacedBy: Int64?) {
        let rows = try await db.rows("SELECT state, replaced_by FROM push.jobs WHERE id = \(job)")
        for try await (state, replacedBy) in rows.decode((String, Int64?).self) { return (state, replacedBy) }
        throw TestFailure("no job \(job)")
    }

    /// A job's tokens, in order, or nil for none.
    static func tokens(_ db: TestDatabase, _ job: Int64) async throws -> [String]? {
        let rows = try await db.rows("SELECT array_to_string(tokens, ',') FROM push.jobs WHERE id = \(job)")
        for try await joined in rows.decode(String?.self) { return joined.map { $0.split(separator: ",").map(String.init) } }
        throw TestFailure("no job \(job)")
    }

    /// push.resend_failed's answer: the new job's id, or nil.
    static func resend(_ db: TestDatabase, _ job: Int64, reasons: String? = nil) async throws -> Int64? {
        let rows = try await db.rows(PostgresQuery(unsafeSQL: reasons.map { "SELECT push.resend_failed(\(job), reasons => '\($0)')" }
            ?? "SELECT push.resend_failed(\(job))"))
        for try await id in rows.decode(Int64?.self) { return id }
        throw TestFailure("push.resend_failed returned no row")
    }

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    // MARK: labels

    @Test func badLabelsOrReplaceKeysAreRefusedNamingTheFieldAndLeaveNoJob() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let manyKeys = "(SELECT jsonb_object_agg('k' || g, 'v') FROM generate_series(1, 33) g)"
            let cases: [(labels: String, mentioning: String)] = [
                ("'[]'", "labels must be a JSON object of strings"),
                (#"'["campaign"]'"#, "not an array"),
                (#"'"black-friday"'"#, "not a string"),
                ("'null'", "not null"),
                ("'7'", "not a number"),
                (#"'{"n":1}'"#, #"labels."n" must be a string, not a number"#),
                (#"'{"a":"x","b":null}'"#, #"labels."b" must be a string, not null"#),
                (#"'{"flag":true}'"#, #"labels."flag" must be a string, not a boolean"#),
                (#"'{"list":["x"]}'"#, #"labels."list" must be a string, not an array"#),
                (#"'{"nested":{"campaign":"x"}}'"#, #"labels."nested" must be a string, not an object"#),
                (#"'{"":"x"}'"#, "labels has an empty key"),
                ("jsonb_build_object(repeat('k', 65), 'v')", "is 65 characters: a label's name is at most 64"),
                ("jsonb_build_object('campaign', repeat('v', 257))", #"labels."campaign" is 257 characters"#),
                (manyKeys, "labels has 33 keys: a job has at most 32 labels"),
            ]
            for (labels, mentioning) in cases {
                await Self.expectRefused(db, "SELECT push.enqueue('app', \(Self.alert), labels => \(labels))",
                                         column: "labels", mentioning: mentioning)
                await Self.expectRefused(db, "INSERT INTO push.jobs (app_id, payload, labels) VALUES ('app', \(Self.alert), \(labels))",
                                         column: "labels", mentioning: mentioning)
            }
            for (key, mentioning) in [("''", "replace_key is empty"), ("repeat('k', 256)", "replace_key is 256 bytes, over the 255-byte limit")] {
                await Self.expectRefused(db, "SELECT push.enqueue('app', \(Self.alert), replace_key => \(key))",
                                         column: "replace_key", mentioning: mentioning)
                await Self.expectRefused(db, "INSERT INTO push.jobs (app_id, payload, replace_key) VALUES ('app', \(Self.alert), \(key))",
                                         column: "replace_key", mentioning: mentioning)
            }
            // Refused in the same statement that would have replaced: the pending job is untouched.
            let pending = try await db.scalar("SELECT push.enqueue('app', \(unescaped: Self.alert), replace_key => 'k')")
            await Self.expectRefused(db, #"SELECT push.enqueue('app', \#(Self.alert), replace_key => 'k', labels => '{"n":1}')"#,
                                     column: "labels", mentioning: #"labels."n" must be a string"#)
            await Self.expectRefused(db, "SELECT push.enqueue('app', '{}', replace_key => 'k')",
                                     column: "payload", mentioning: #"no "aps" dictionary"#)
            #expect(try await Self.replacement(db, pending) == ("queued", nil))
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 1, "a refused enqueue left a job")

            // The limits themselves are allowed, and an empty object is no labels.
            let widest = try await db.scalar("""
                SELECT push.enqueue('app', \(unescaped: Self.alert), labels => (SELECT jsonb_object_agg(
                    CASE WHEN g = 1 THEN repeat('k', 64) ELSE 'k' || g END, CASE WHEN g = 2 THEN repeat('v', 256) ELSE '' END)
                    FROM generate_series(1, 32) g))
                """)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs j, jsonb_object_keys(j.labels) k WHERE j.id = \(widest)") == 32)
            let empty = try await db.scalar("SELECT push.enqueue('app', \(unescaped: Self.alert), labels => '{}')")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(empty) AND labels IS NULL") == 1)
            let none = try await db.scalar("SELECT push.enqueue('app', \(unescaped: Self.alert))")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(none) AND labels IS NULL AND replace_key IS NULL") == 1)
        }
    }

    @Test func labelsAreKeptAndShownByTheViewsAndTheContainmentFilterUsesTheIndex() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let friday = try await db.scalar(#"""
                SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', labels => '{"campaign": "black-friday", "team": "growth"}')
                """#)
            let monday = try await db.scalar(#"""
                SELECT push.enqueue('app', '{"aps":{"alert":"y"}}', labels => '{"campaign": "cyber-monday", "team": "growth"}')
                """#)
            let plain = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"z"}}')"#)
            // A plain INSERT keeps labels the same way.
            let inserted = try await db.scalar(#"""
                INSERT INTO push.jobs (app_id, payload, labels) VALUES ('app', '{"aps":{}}', '{"campaign": "black-friday"}') RETURNING id
                """#)
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 10, delivered = 8, failed = 2")

            for view in ["push.job_progress", "push.job_latency", "push.job_engagement"] {
                let rows = try await db.rows(PostgresQuery(unsafeSQL: """
                    SELECT DISTINCT job_id, labels ->> 'campaign' FROM \(view) WHERE labels @> '{"campaign": "black-friday"}' ORDER BY 1
                    """))
                var found: [Int64] = []
                for try await (job, campaign) in rows.decode((Int64, String?).self) {
                    found.append(job)
                    #expect(campaign == "black-friday", "\(view)")
                }
                #expect(found == [friday, inserted], "\(view)")
                #expect(try await db.scalar(PostgresQuery(unsafeSQL: "SELECT count(DISTINCT job_id) FROM \(view) WHERE labels IS NULL")) == 1,
                        "\(view): the job without labels (\(plain))")
                #expect(try await db.scalar(PostgresQuery(unsafeSQL: """
                    SELECT count(DISTINCT job_id) FROM \(view) WHERE labels @> '{"team": "growth"}'
                    """)) == 2, "\(view)")
            }
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.job_progress WHERE job_id = \(monday) AND labels = '{"team": "growth", "campaign": "cyber-monday"}'
                """) == 1)

            // Every column the views had keeps its place; the new ones come last, before those of later migrations
            // (0027's web counts, 0028's broadcast controls).
            for (view, tail) in [
                ("job_progress", ["cancelled_tokens", "channel", "labels", "replace_key", "replaced_by", "resent_from",
                                  "web_total", "web_delivered", "web_failed", "web_pending", "capped", "throttle",
                                  "estimated_finish_at", "waiting_tokens", "waiting_zones", "waiting_moments"]),
                ("job_latency", ["enqueue_to_first_send", "enqueue_to_finish", "labels"]),
                ("job_engagement", ["created_at", "state", "labels"]),
            ] {
                let rows = try await db.rows("""
                    SELECT array_to_string(array_agg(column_name::text ORDER BY ordinal_position), ',')
                      FROM information_schema.columns WHERE table_schema = 'push' AND table_name = \(view)
                    """)
                for try await columns in rows.decode(String.self) {
                    #expect(Array(columns.split(separator: ",").suffix(tail.count).map(String.init)) == tail, "\(view): \(columns)")
                }
            }
            #expect(try await db.scalar("""
                SELECT count(*) FROM information_schema.columns
                 WHERE table_schema = 'push' AND table_name = 'job_progress' AND column_name = 'job_id' AND ordinal_position = 1
                """) == 1)

            // `labels @> …` on push.job_progress is answered from the GIN index.
            let plan = try await db.client.withConnection { connection in
                try await Self.run(connection, "SET enable_seqscan = off", db: db)
                let rows = try await Self.run(connection, """
                    EXPLAIN SELECT job_id FROM push.job_progress WHERE labels @> '{"campaign": "black-friday"}'
                    """, db: db)
                try await Self.run(connection, "RESET enable_seqscan", db: db)
                return try rows.map { try $0.decode(String.self) }.joined(separator: "\n")
            }
            #expect(plan.contains("jobs_labels"), "\(plan)")
        }
    }

    // MARK: replace_key

    @Test func anEnqueueWithAReplaceKeyCancelsTheKeysPendingJobAsCancelDoes() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.createApp("other", topic: "com.example.other")
            let first = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"2 new"}}', replace_key => 'chat-42')"#)
            let otherKey = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', replace_key => 'chat-7')"#)
            let otherApp = try await db.scalar(#"SELECT push.enqueue('other', '{"aps":{"alert":"x"}}', replace_key => 'chat-42')"#)
            let noKey = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}')"#)
            let scheduled = try await db.scalar(#"""
                SELECT push.enqueue('app', '{"aps":{"alert":"3 new"}}', replace_key => 'chat-42', send_at => now() + interval '1 hour')
                """#)
            #expect(try await Self.replacement(db, first) == ("cancelled", scheduled))
            #expect(try await Self.replacement(db, scheduled) == ("queued", nil))
            for untouched in [otherKey, otherApp, noKey] {
                #expect(try await Self.replacement(db, untouched) == ("queued", nil), "job \(untouched)")
            }

            // A running job that has sent nothing yet is replaced too, its unclaimed chunks dropped and counted as
            // push.cancel counts them; a chunk a worker holds is left to it.
            try await db.exec("UPDATE push.jobs SET state = 'running', total = 5, started_at = now() WHERE id = \(scheduled)")
            try await db.exec("""
                INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, tokens, estimated_tokens, locked_by, locked_until)
                VALUES (\(scheduled), 'app', 0, 0, 'tokens', ARRAY[\(TestTokens.token(1)), \(TestTokens.token(2)), \(TestTokens.token(3))], 3, NULL, NULL),
                       (\(scheduled), 'app', 0, 1, 'tokens', ARRAY[\(TestTokens.token(4)), \(TestTokens.token(5))], 2, 'worker-1', now() + interval '1 min')
                """)
            let latest = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"4 new"}}', replace_key => 'chat-42')"#)
            #expect(try await Self.replacement(db, scheduled) == ("cancelled", latest))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(scheduled) AND cancelled_tokens = 3 AND total = 2 AND finished_at IS NOT NULL
                """) == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE job_id = \(scheduled)") == 1, "the held chunk stays")
            #expect(try await db.scalar("SELECT count(*) FROM push.job_progress WHERE replace_key = 'chat-42' AND state IN ('queued', 'running')") == 2,
                    "the latest job, and the other app's")

            // The producer sees what happened in push.job_progress.
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.job_progress WHERE job_id = \(scheduled) AND state = 'cancelled' AND replaced_by = \(latest)
                   AND replace_key = 'chat-42' AND cancelled_tokens = 3
                """) == 1)
        }
    }

    @Test func aJobThatHasSentAnythingIsNotReplacedAndTheNewOneGoesBesideIt() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let enqueue = #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', replace_key => 'k')"#
            let firstSent = try await db.scalar(PostgresQuery(unsafeSQL: enqueue))
            try await db.exec("UPDATE push.jobs SET state = 'running', started_at = now(), first_sent_at = now() WHERE id = \(firstSent)")
            let outcomeOnly = try await db.scalar(PostgresQuery(unsafeSQL: enqueue))
            #expect(try await Self.replacement(db, firstSent) == ("running", nil))
            // Running with an outcome recorded but (as a worker in the middle of its write might leave it) no first send.
            try await db.exec("UPDATE push.jobs SET state = 'running', started_at = now() WHERE id = \(outcomeOnly)")
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at)
                VALUES (\(outcomeOnly), 'app', \(TestTokens.token(1)), 410, 'Unregistered', gen_random_uuid(), 1, now())
                """)
            let finished = try await db.scalar(PostgresQuery(unsafeSQL: enqueue))
            try await db.exec("UPDATE push.jobs SET state = 'done', finished_at = now() WHERE id = \(finished)")
            let latest = try await db.scalar(PostgresQuery(unsafeSQL: enqueue))

            #expect(try await Self.replacement(db, firstSent) == ("running", nil))
            #expect(try await Self.replacement(db, outcomeOnly) == ("running", nil))
            #expect(try await Self.replacement(db, finished) == ("done", nil))
            #expect(try await Self.replacement(db, latest) == ("queued", nil))
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE replaced_by IS NOT NULL OR cancelled_tokens > 0") == 0)
        }
    }

    @Test func anIdempotentRetryReplacesNothingAndTheLastOfSeveralInOneStatementOrTransactionWins() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let a = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"a"}}', replace_key => 'k', idempotency_key => 'a')"#)
            let b = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"b"}}', replace_key => 'k', idempotency_key => 'b')"#)
            #expect(try await Self.replacement(db, a) == ("cancelled", b))
            // Retrying the first enqueue returns its job, replaced as it is, and leaves b pending.
            #expect(try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"a"}}', replace_key => 'k', idempotency_key => 'a')"#) == a)
            #expect(try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"b"}}', replace_key => 'k', idempotency_key => 'b')"#) == b)
            #expect(try await Self.replacement(db, b) == ("queued", nil))
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 2)

            // One INSERT of three rows with the key: the last is pending, each replaced by the next.
            let rows = try await db.exec("""
                INSERT INTO push.jobs (app_id, payload, replace_key)
                VALUES ('app', '{"aps":{"alert":"1"}}', 'k'), ('app', '{"aps":{"alert":"2"}}', 'k'), ('app', '{"aps":{"alert":"3"}}', 'k')
                RETURNING id
                """)
            let ids = try rows.map { try $0.decode(Int64.self) }.sorted()
            #expect(try await Self.replacement(db, b) == ("cancelled", ids[0]))
            #expect(try await Self.replacement(db, ids[0]) == ("cancelled", ids[1]))
            #expect(try await Self.replacement(db, ids[1]) == ("cancelled", ids[2]))
            #expect(try await Self.replacement(db, ids[2]) == ("queued", nil))

            // Two enqueues in one transaction: the later stays.
            let pair = try await db.client.withConnection { connection in
                try await Self.run(connection, "BEGIN", db: db)
                let first = try await Self.run(connection, #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', replace_key => 'k')"#, db: db)
                let second = try await Self.run(connection, #"SELECT push.enqueue('app', '{"aps":{"alert":"y"}}', replace_key => 'k')"#, db: db)
                try await Self.run(connection, "COMMIT", db: db)
                return (try first.first!.decode(Int64.self), try second.first!.decode(Int64.self))
            }
            #expect(try await Self.replacement(db, ids[2]) == ("cancelled", pair.0))
            #expect(try await Self.replacement(db, pair.0) == ("cancelled", pair.1))
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE replace_key = 'k' AND state = 'queued'") == 1)

            // A replacement rolled back with its transaction replaced nothing.
            try await db.client.withConnection { connection in
                try await Self.run(connection, "BEGIN", db: db)
                try await Self.run(connection, #"SELECT push.enqueue('app', '{"aps":{"alert":"z"}}', replace_key => 'k')"#, db: db)
                try await Self.run(connection, "ROLLBACK", db: db)
            }
            #expect(try await Self.replacement(db, pair.1) == ("queued", nil))
        }
    }

    @Test func aHundredConcurrentEnqueuesWithOneKeyLeaveExactlyOnePendingJob() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let user = try await db.createLogin(memberOf: "pgpush_producer")
            let producers = 100
            // Every connection is open before the first enqueue, so the enqueues overlap.
            let connections = try await withThrowingTaskGroup(of: PostgresConnection.self) { group in
                for _ in 0..<producers { group.addTask { try await db.connect(as: user) } }
                var all: [PostgresConnection] = []
                for try await connection in group { all.append(connection) }
                return all
            }
            defer { for connection in connections { Task { try? await connection.close() } } }

            let ids = try await withThrowingTaskGroup(of: Int64.self) { group in
                for (index, connection) in connections.enumerated() {
                    group.addTask {
                        let payload = #"{"aps":{"alert":"\#(index) unread"}}"#
                        try await Self.run(connection, "BEGIN", db: db)
                        let rows = try await Self.run(connection, "SELECT push.enqueue('app', \(payload)::jsonb, replace_key => 'chat-42')", db: db)
                        // Holding the key's lock a moment before committing makes the others queue behind it.
                        try await Self.run(connection, "SELECT pg_sleep(random() * 0.02)", db: db)
                        try await Self.run(connection, "COMMIT", db: db)
                        return try rows.first!.decode(Int64.self)
                    }
                }
                var ids: [Int64] = []
                for try await id in group { ids.append(id) }
                return ids
            }
            #expect(Set(ids).count == producers)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE replace_key = 'chat-42'") == Int64(producers))
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state IN ('queued', 'running')") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state = 'queued' AND replaced_by IS NULL") == 1)
            // Every other job was cancelled by one of the key's jobs, which was enqueued after it committed.
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs j JOIN push.jobs r ON r.id = j.replaced_by AND r.replace_key = 'chat-42'
                 WHERE j.state = 'cancelled' AND j.finished_at IS NOT NULL
                """) == Int64(producers - 1))
            for connection in connections { try? await connection.close() }
        }
    }

    @Test func replaceKeyIsRefusedInRepeatableReadAndSafeInSerializable() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let enqueue: PostgresQuery = #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', replace_key => 'k')"#
            try await db.client.withConnection { connection in
                try await Self.run(connection, "BEGIN ISOLATION LEVEL REPEATABLE READ", db: db)
                do {
                    try await Self.run(connection, enqueue, db: db)
                    Issue.record("a replace_key was accepted in REPEATABLE READ")
                } catch let error as PSQLError {
                    #expect(error.serverInfo?[.columnName] == "replace_key")
                    #expect(error.serverInfo?[.sqlState] == "0A000")
                    #expect(error.serverMessage?.contains("REPEATABLE READ") == true, "\(error.serverMessage ?? "")")
                }
                try await Self.run(connection, "ROLLBACK", db: db)
                // Without a key, REPEATABLE READ is fine.
                try await Self.run(connection, "BEGIN ISOLATION LEVEL REPEATABLE READ", db: db)
                try await Self.run(connection, #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}')"#, db: db)
                try await Self.run(connection, "COMMIT", db: db)
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 1)

            // Two SERIALIZABLE transactions whose snapshots predate each other's job: the second to take the key's
            // lock cannot see the first's job, so it fails with a serialization error instead of leaving two.
            let first = try await db.connect(asMemberOf: "pgpush_producer")
            let second = try await db.connect(asMemberOf: "pgpush_producer")
            defer { Task { try? await first.close(); try? await second.close() } }
            for connection in [first, second] {
                try await Self.run(connection, "BEGIN ISOLATION LEVEL SERIALIZABLE", db: db)
                try await Self.run(connection, "SELECT 1", db: db)
            }
            try await Self.run(first, enqueue, db: db)
            let waiting = Task {
                try await Self.run(second, enqueue, db: db)
                try await Self.run(second, "COMMIT", db: db)
            }
            try await Task.sleep(for: .milliseconds(200))
            try await Self.run(first, "COMMIT", db: db)
            do {
                try await waiting.value
                Issue.record("the second SERIALIZABLE enqueue committed")
            } catch let error as PSQLError {
                #expect(error.serverInfo?[.sqlState] == "40001", "\(error.serverMessage ?? "\(error)")")
            }
            _ = try? await Self.run(second, "ROLLBACK", db: db)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE replace_key = 'k' AND state = 'queued'") == 1)
        }
    }

    // MARK: push.resend_failed

    @Test func resendFailedSendsTheMessageAgainToExactlyTheTokensWorthRetrying() async throws {
        try await TestDatabase.with { db in
            try await PerDeviceContentTests.createApps(db)
            let android = PerDeviceContentTests.androidToken(1)
            let ios = (0..<12).map { TestTokens.token($0) }
            for token in ios { try await db.exec("SELECT push.register_device('dual', \(token))") }
            try await db.exec("SELECT push.register_device('dual', \(android), platform => 'android')")
            let everyone = "ARRAY['\((ios + [android]).joined(separator: "','"))']"
            let original = try await db.scalar(PostgresQuery(unsafeSQL: #"""
                SELECT push.enqueue('dual', '{"aps":{"alert":"Sale","sound":"default"},"deal":"7"}', tokens => \#(everyone),
                                    apns_priority => 5, priority => 3, collapse_id => 'sale', expires_at => now() + interval '1 day',
                                    idempotency_key => 'sale-7', replace_key => 'sale', badge => 'increment',
                                    localized => '{"fr":{"aps":{"alert":"Soldes"}}}',
                                    labels => '{"campaign": "black-friday", "team": "growth"}')
                """#))
            try await db.exec("SELECT push.ensure_delivery_partitions(1)")
            // The outcomes, as workers and the pruner leave them.
            let outcomes: [(token: String, status: Int, reason: String?, platform: String)] = [
                (ios[0], 200, nil, "ios"), (ios[1], 200, nil, "ios"),
                (ios[2], 503, "ServiceUnavailable", "ios"), (ios[3], 500, "InternalServerError", "ios"),
                (ios[4], 429, "TooManyRequests", "ios"),
                (ios[5], 410, "Unregistered", "ios"),          // pruned because of this job
                (ios[6], 0, "LeaseExpired", "ios"),
                (ios[7], 0, "Expired", "ios"),
                (ios[8], 400, "BadDeviceToken", "ios"),        // a permanent failure: only when asked for
                (ios[9], 0, "ConnectionClosed", "ios"),        // no longer a device
                (ios[10], 502, "BadGateway", "ios"),           // pruned because of this job, then registered again
                (ios[11], 0, "FrequencyCapped", "ios"),
                (android, 503, "UNAVAILABLE", "android"),
            ]
            for outcome in outcomes {
                try await db.exec("""
                    INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at, platform)
                    VALUES (\(original), 'dual', \(outcome.token), \(outcome.status), \(outcome.reason), gen_random_uuid(), 1, now(), \(outcome.platform))
                    """)
            }
            try await db.exec("""
                INSERT INTO push.pruned_devices (app_id, token, reason, job_id)
                VALUES ('dual', \(ios[5]), 'Unregistered', \(original)), ('dual', \(ios[10]), 'Unregistered', \(original))
                """)
            try await db.exec("DELETE FROM push.devices WHERE token IN (\(ios[5]), \(ios[9]))")
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 13, delivered = 2, failed = 9, expired = 2, finished_at = now() WHERE id = \(original)")

            let resent = try #require(try await Self.resend(db, original))
            let expected = [ios[2], ios[3], ios[4], ios[6], android].sorted()
            #expect(try await Self.tokens(db, resent)?.sorted() == expected)
            // The same message, checked and resolved again like any job; not its idempotency or replace key.
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs r JOIN push.jobs o ON o.id = r.resent_from
                 WHERE r.id = \(resent) AND o.id = \(original) AND r.app_id = o.app_id AND r.payload = o.payload
                   AND r.push_type = o.push_type AND r.apns_priority = 5 AND r.priority = 3 AND r.collapse_id = 'sale'
                   AND r.expires_at = o.expires_at AND r.fcm = o.fcm AND r.localized = o.localized AND r.variants = o.variants
                   AND r.badge = 'increment' AND r.labels = '{"campaign": "black-friday", "team": "growth"}'
                   AND r.state = 'queued' AND r.idempotency_key IS NULL AND r.replace_key IS NULL AND r.replaced_by IS NULL
                   AND r.send_at <= now()
                """) == 1)
            #expect(try await Self.replacement(db, original) == ("done", nil), "a resend replaces nothing")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.job_progress WHERE job_id = \(resent) AND resent_from = \(original) AND labels ->> 'campaign' = 'black-friday'
                """) == 1)

            // A second call finds every token already in a resend.
            #expect(try await Self.resend(db, original) == nil)
            // Reasons add tokens; pruned ones and those already resent stay out.
            let more = try #require(try await Self.resend(db, original, reasons: "{BadDeviceToken,Unregistered,ServiceUnavailable}"))
            #expect(try await Self.tokens(db, more) == [ios[8]])
            // Once the resend is cancelled, its tokens may be resent again.
            try await db.exec("SELECT push.cancel(\(resent))")
            let again = try #require(try await Self.resend(db, original))
            #expect(try await Self.tokens(db, again)?.sorted() == expected)
            // A resend's own failures are resent from it.
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at, platform)
                VALUES (\(again), 'dual', \(ios[2]), 200, NULL, gen_random_uuid(), 1, now(), 'ios'),
                       (\(again), 'dual', \(ios[3]), 503, 'ServiceUnavailable', gen_random_uuid(), 1, now(), 'ios')
                """)
            let chained = try #require(try await Self.resend(db, again))
            #expect(try await Self.tokens(db, chained) == [ios[3]])
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(chained) AND resent_from = \(again) AND labels ? 'campaign'") == 1)
        }
    }

    @Test func resendFailedRefusesUnknownChannelAndExpiredJobsAndReturnsNullWhenNothingFailed() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(1)))")
            let delivered = try await db.scalar("SELECT push.enqueue('app', \(unescaped: Self.alert))")
            try await db.exec("SELECT push.ensure_delivery_partitions(1)")
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, apns_id, attempt, sent_at)
                VALUES (\(delivered), 'app', \(TestTokens.token(1)), 200, gen_random_uuid(), 1, now())
                """)
            let unsent = try await db.scalar("SELECT push.enqueue('app', \(unescaped: Self.alert))")
            let expiring = try await db.scalar("SELECT push.enqueue('app', \(unescaped: Self.alert), expires_at => now() + interval '1 hour')")
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at)
                VALUES (\(expiring), 'app', \(TestTokens.token(1)), 503, 'ServiceUnavailable', gen_random_uuid(), 1, now())
                """)
            try await db.exec("UPDATE push.jobs SET expires_at = now() - interval '1 minute' WHERE id = \(expiring)")
            try await db.exec("SELECT push.create_channel('app', 'match', storage_policy => 0)")
            try await db.exec("UPDATE push.channels SET state = 'active', channel_id = 'bWF0Y2g=', active_at = now() WHERE name = 'match'")
            let channel = try await db.scalar(#"""
                SELECT push.enqueue('app', '{"aps":{"timestamp":1767225600,"event":"update","content-state":{"s":1}}}', channel => 'match')
                """#)
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at)
                VALUES (\(channel), 'app', 'bWF0Y2g=', 503, 'ServiceUnavailable', gen_random_uuid(), 1, now())
                """)
            let jobs = try await db.scalar("SELECT count(*) FROM push.jobs")

            await Self.expectRefused(db, "SELECT push.resend_failed(\(channel + 1000))",
                                     column: "job_id", sqlState: PerDeviceContentTests.noDataFound, mentioning: "unknown job_id: \(channel + 1000)")
            await Self.expectRefused(db, "SELECT push.resend_failed(NULL)", column: "job_id", sqlState: "23502", mentioning: "job_id is required")
            await Self.expectRefused(db, "SELECT push.resend_failed(\(channel))", column: "job_id", mentioning: "is a broadcast on channel 'match'")
            await Self.expectRefused(db, "SELECT push.resend_failed(\(expiring))", column: "job_id", mentioning: "job \(expiring) expired at")
            // Nothing failed worth retrying: NULL, and no job.
            #expect(try await Self.resend(db, delivered) == nil)
            #expect(try await Self.resend(db, unsent) == nil)
            #expect(try await Self.resend(db, delivered, reasons: "{}") == nil)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == jobs)
        }
    }

    // MARK: roles and tenancy

    @Test func aProducerLabelsReplacesAndResendsItsOwnAppsJobsOnly() async throws {
        try await TestDatabase.with { db in
            let jobs = try await TenancyTests.twoApps(db)
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at)
                VALUES (\(jobs.a), 'a', \(TestTokens.token(3)), 503, 'ServiceUnavailable', gen_random_uuid(), 1, now()),
                       (\(jobs.b), 'b', \(TestTokens.token(4)), 503, 'ServiceUnavailable', gen_random_uuid(), 1, now())
                """)
            try await db.exec("SELECT push.register_device('a', \(TestTokens.token(3)))")
            try await db.exec("SELECT push.register_device('b', \(TestTokens.token(4)))")
            let otherPending = try await db.scalar(#"SELECT push.enqueue('b', '{"aps":{}}', replace_key => 'k')"#)
            let user = try await db.createLogin(memberOf: "pgpush_producer")
            try await db.exec("SELECT push.grant_app(\(user), 'a')")
            let producer = try await db.connect(as: user)
            defer { Task { try? await producer.close() } }

            for sql in [
                #"SELECT push.enqueue('a', '{"aps":{}}', labels => '{"campaign": "x"}', replace_key => 'k')"#,
                #"INSERT INTO push.jobs (app_id, payload, labels, replace_key) VALUES ('a', '{"aps":{}}', '{"campaign": "y"}', 'k') RETURNING id"#,
                "SELECT push.resend_failed(\(jobs.a))",
                "SELECT labels, replace_key, replaced_by, resent_from FROM push.job_progress",
                "SELECT labels FROM push.job_latency",
                "SELECT labels FROM push.job_engagement",
            ] {
                let failure = await TenancyTests.attempt(producer, sql, db: db)
                #expect(failure == nil, "refused for its own app: \(sql): \(failure ?? "")")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE resent_from = \(jobs.a) AND tokens = ARRAY[\(TestTokens.token(3))]") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE app_id = 'a' AND replace_key = 'k' AND state = 'queued'") == 1)
            #expect(try await Self.replacement(db, otherPending) == ("queued", nil), "another app's job with the same key")

            // Another app's job is as unknown as one that does not exist; enqueueing to it is denied.
            let crossed = await TenancyTests.attempt(producer, "SELECT push.resend_failed(\(jobs.b))", db: db)
            #expect(crossed?.contains("unknown job_id: \(jobs.b)") == true, "\(crossed ?? "nil")")
            let denied = await TenancyTests.attempt(producer, #"SELECT push.enqueue('b', '{"aps":{}}', replace_key => 'k')"#, db: db)
            #expect(denied?.contains("permission denied for app_id") == true, "\(denied ?? "nil")")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE resent_from = \(jobs.b)") == 0)
            #expect(try await Self.replacement(db, otherPending) == ("queued", nil))

            // What only the database writes stays the database's.
            for sql in [
                #"INSERT INTO push.jobs (app_id, payload, resent_from) VALUES ('a', '{"aps":{}}', 1)"#,
                #"INSERT INTO push.jobs (app_id, payload, replaced_by) VALUES ('a', '{"aps":{}}', 1)"#,
                "UPDATE push.jobs SET labels = NULL",
                "SELECT labels FROM push.jobs",
            ] {
                let failure = await TenancyTests.attempt(producer, sql, db: db)
                #expect(failure?.contains("permission denied") == true, "producer was allowed: \(sql)")
            }
            // A reader reads the new columns and resends nothing.
            let reader = try await db.connect(asMemberOf: "pgpush_reader")
            defer { Task { try? await reader.close() } }
            #expect(await RoleGrantTests.attempt(reader, "SELECT labels, replaced_by FROM push.job_progress", db: db) == nil)
            let readerResend = await RoleGrantTests.attempt(reader, "SELECT push.resend_failed(\(jobs.a))", db: db)
            #expect(readerResend?.contains("permission denied") == true, "\(readerResend ?? "nil")")
        }
    }
}
