import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// What migration 0020 made cheaper and must not have changed: a one-token list is checked and stored as any
/// list is, push.token_platform keeps its rule, and the wake-up of idle workers comes once per transaction, at
/// its commit, however many jobs it inserts.
@Suite(.database, .timeLimit(.minutes(3)))
struct OneTokenEnqueueTests {
    static let payload = #"{"aps":{"alert":"Your order shipped"}}"#

    // MARK: the one-token list

    @Test(arguments: [
        ("ARRAY['xyz']", "'xyz'"),
        ("ARRAY[repeat('a', 63)]", "'aaaaaaaaaaaa…'"),
        ("ARRAY[repeat('a', 201)]", "'aaaaaaaaaaaa…'"),
        ("ARRAY[repeat('a', 63) || 'g']", "'aaaaaaaaaaaa…'"),
        ("ARRAY[repeat('a', 64) || E'\\n']", "'aaaaaaaaaaaa…'"),
        ("ARRAY[NULL]::text[]", "NULL"),
        ("'[3:3]={xyz}'::text[]", "'xyz'"),
        ("ARRAY[ARRAY['xyz']]", "'xyz'"),
    ])
    func anInvalidSingleTokenIsRefusedNamingTheField(_ tokens: String, _ shown: String) async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            for statement in [
                "SELECT push.enqueue('app', '\(Self.payload)', tokens => \(tokens))",
                "INSERT INTO push.jobs (app_id, payload, tokens) VALUES ('app', '\(Self.payload)', \(tokens))",
            ] {
                let error = await #expect(throws: PSQLError.self) { try await db.exec(PostgresQuery(unsafeSQL: statement)) }
                #expect(error?.serverInfo?[.columnName] == "tokens", "\(statement)")
                #expect(error?.serverMessage == "tokens contains an invalid device token \(shown): a token is 64 to 200 hex characters",
                        "\(statement)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    @Test func aSingleTokenIsStoredAsTheListWouldStoreIt() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.exec("""
                INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path, fcm_project_id, fcm_service_account_path)
                VALUES ('dual', 'com.example.dual', 'TEAM123456', 'KEY1234567', 'dual.p8', 'demo-project', 'dual-sa.json')
                """)
            let upper = String(repeating: "AB", count: 32)
            let longest = String(repeating: "F", count: 200)
            let fcm = "fYK3abcdEFGH:APA91bHqwe-_rty0123456789"
            let cases: [(String, [String])] = [
                ("SELECT push.enqueue('app', '\(Self.payload)', tokens => ARRAY['\(upper)'])", [upper.lowercased()]),
                ("SELECT push.enqueue('app', '\(Self.payload)', tokens => ARRAY['\(longest)'])", [longest.lowercased()]),
                ("SELECT push.enqueue('app', '\(Self.payload)', tokens => '[3:3]={\(upper)}'::text[])", [upper.lowercased()]),
                ("SELECT push.enqueue('app', '\(Self.payload)', tokens => ARRAY[ARRAY['\(upper)']])", [upper.lowercased()]),
                ("INSERT INTO push.jobs (app_id, payload, tokens) VALUES ('app', '\(Self.payload)', ARRAY['\(upper)']) RETURNING id",
                 [upper.lowercased()]),
                // An FCM registration token is case-sensitive: kept as given; a hex token of an app with both is APNs'.
                ("SELECT push.enqueue('dual', '\(Self.payload)', tokens => ARRAY['\(fcm)'])", [fcm]),
                ("SELECT push.enqueue('dual', '\(Self.payload)', tokens => ARRAY['\(upper)'])", [upper.lowercased()]),
            ]
            for (statement, expected) in cases {
                let id = try await db.scalar(PostgresQuery(unsafeSQL: statement))
                let rows = try await db.rows("SELECT tokens, array_lower(tokens, 1)::int8 FROM push.jobs WHERE id = \(id)")
                for try await (tokens, lower) in rows.decode(([String], Int64).self) {
                    #expect(tokens == expected, "\(statement)")
                    #expect(lower == 1, "\(statement)")
                }
            }
        }
    }

    /// The rule of 0009 was '^[0-9A-Fa-f]{64,200}$' (slow to match); 0020 checks the length apart. Both must
    /// take and refuse the same tokens, for every combination of credentials.
    @Test func tokenPlatformKeepsTheRuleOf0009() async throws {
        try await TestDatabase.with { db in
            let differing = try await db.scalar(#"""
                WITH s(x) AS (
                    VALUES (NULL::text), (''), (repeat('a', 63)), (repeat('a', 64)), (repeat('A', 200)), (repeat('f', 201)),
                           (repeat('a', 63) || 'g'), (repeat('a', 64) || E'\n'), (E'\n' || repeat('a', 64)),
                           (repeat('a', 63) || 'é'), (repeat('é', 70)), (repeat('0', 100) || ' '), (repeat('x', 15)),
                           (repeat('x', 16)), (repeat('x:_-', 256)), (repeat('x', 1025)), ('abc$def012345678'),
                           (repeat('ab', 40) || 'Z'), (repeat('a', 64) || '-')
                    UNION ALL
                    SELECT substr(md5(i::text) || md5((i * 7)::text) || md5((i * 13)::text) || repeat(chr(65 + i % 60), i % 5),
                                  1 + i % 5, 40 + i % 170)
                      FROM generate_series(1, 3000) AS i
                ), credentials(apns, fcm) AS (VALUES (true, true), (true, false), (false, true), (false, false))
                SELECT count(*) FROM s, credentials
                 WHERE push.token_platform(x, apns, fcm, false) IS DISTINCT FROM
                       CASE WHEN apns AND x ~ '^[0-9A-Fa-f]{64,200}$' THEN 'ios'
                            WHEN fcm AND x ~ '^[A-Za-z0-9_:-]+$' AND length(x) BETWEEN 16 AND 1024 THEN 'android' END
                """#)
            #expect(differing == 0)
        }
    }

    // MARK: the wake-up

    /// Every notification on pgpush_jobs up to `marker`, which is sent last: notifications arrive in commit order.
    nonisolated(nonsending) static func notifications(
        until marker: String, from received: inout PostgresNotificationSequence.AsyncIterator, db: TestDatabase
    ) async throws -> [String] {
        try await db.exec("SELECT pg_notify('pgpush_jobs', \(marker))")
        var payloads: [String] = []
        while let notification = try await received.next(isolation: #isolation), notification.payload != marker {
            payloads.append(notification.payload)
        }
        return payloads
    }

    @Test func aSingleJobWakesAListenerOnceAtCommit() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.client.withConnection { listener in
                try await listener.listen(on: "pgpush_jobs") { notifications in
                    var received = notifications.makeAsyncIterator()
                    try await db.exec("SELECT push.enqueue('app', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(1))])")
                    #expect(try await Self.notifications(until: "marker-1", from: &received, db: db) == [""])
                    try await db.exec("INSERT INTO push.jobs (app_id, payload, tokens) VALUES ('app', \(Self.payload)::jsonb, ARRAY[\(TestTokens.token(2))])")
                    #expect(try await Self.notifications(until: "marker-2", from: &received, db: db) == [""])
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 2)
        }
    }

    @Test func aTransactionOfManyJobsWakesAListenerOnceAtItsCommit() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.client.withConnection { listener in
                try await listener.listen(on: "pgpush_jobs") { notifications in
                    var received = notifications.makeAsyncIterator()
                    try await db.client.withConnection { producer in
                        for round in 0..<2 {
                            _ = try await producer.query("BEGIN", logger: db.logger).collect()
                            for index in 0..<3 {
                                _ = try await producer.query(
                                    "SELECT push.enqueue('app', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(round * 10 + index))])",
                                    logger: db.logger).collect()
                            }
                            _ = try await producer.query(
                                "INSERT INTO push.jobs (app_id, payload, user_ids) VALUES ('app', \(Self.payload)::jsonb, '{u1}')",
                                logger: db.logger).collect()
                            // Nothing before the commit.
                            #expect(try await Self.notifications(until: "open-\(round)", from: &received, db: db) == [])
                            _ = try await producer.query("COMMIT", logger: db.logger).collect()
                            // One at the commit, and again for the next transaction on the same connection.
                            #expect(try await Self.notifications(until: "committed-\(round)", from: &received, db: db) == [""])
                        }
                    }
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 8)
        }
    }

    @Test func aRolledBackSavepointDoesNotSwallowTheWakeUpOfLaterJobs() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.client.withConnection { listener in
                try await listener.listen(on: "pgpush_jobs") { notifications in
                    var received = notifications.makeAsyncIterator()
                    try await db.client.withConnection { producer in
                        func run(_ sql: String) async throws {
                            _ = try await producer.query(PostgresQuery(unsafeSQL: sql), logger: db.logger).collect()
                        }
                        let enqueue = "SELECT push.enqueue('app', '\(Self.payload)', tokens => ARRAY['\(TestTokens.token(7))'])"
                        // The first job's notification goes with its savepoint; the second job must still wake.
                        try await run("BEGIN")
                        try await run("SAVEPOINT first")
                        try await run(enqueue)
                        try await run("ROLLBACK TO SAVEPOINT first")
                        try await run(enqueue)
                        try await run("COMMIT")
                        #expect(try await Self.notifications(until: "after-savepoint", from: &received, db: db) == [""])

                        // The same when the job's statement fails inside a function's exception block.
                        try await run("BEGIN")
                        try await run("""
                            DO $$ BEGIN
                                PERFORM push.enqueue('app', '\(Self.payload)', tokens => ARRAY['\(TestTokens.token(8))']);
                                RAISE EXCEPTION 'the producer changes its mind';
                            EXCEPTION WHEN raise_exception THEN NULL;
                            END $$
                            """)
                        try await run(enqueue)
                        try await run("COMMIT")
                        #expect(try await Self.notifications(until: "after-exception", from: &received, db: db) == [""])

                        // A rolled back transaction wakes nobody.
                        try await run("BEGIN")
                        try await run(enqueue)
                        try await run("ROLLBACK")
                        #expect(try await Self.notifications(until: "after-rollback", from: &received, db: db) == [])
                    }
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 2)
        }
    }

    @Test func aProducerLoginEnqueuesAndWakesListeners() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let producer = try await db.connect(asMemberOf: "pgpush_producer")
            defer { Task { try? await producer.close() } }
            try await db.client.withConnection { listener in
                try await listener.listen(on: "pgpush_jobs") { notifications in
                    var received = notifications.makeAsyncIterator()
                    _ = try await producer.query(
                        "SELECT push.enqueue('app', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(3))])",
                        logger: db.logger).collect()
                    _ = try await producer.query("BEGIN", logger: db.logger).collect()
                    _ = try await producer.query(
                        "SELECT push.enqueue('app', \(Self.payload)::jsonb, tokens => ARRAY[\(TestTokens.token(4))])",
                        logger: db.logger).collect()
                    _ = try await producer.query(
                        "SELECT push.enqueue('app', \(Self.payload)::jsonb, user_ids => '{u1}', idempotency_key => 'k1')",
                        logger: db.logger).collect()
                    _ = try await producer.query("COMMIT", logger: db.logger).collect()
                    #expect(try await Self.notifications(until: "marker", from: &received, db: db) == ["", ""])
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 3)
        }
    }
}
