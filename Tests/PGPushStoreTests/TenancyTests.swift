import Foundation
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// push.grant_app / push.revoke_app: a login granted some apps uses those only; without grants, as before.
@Suite(.database, .timeLimit(.minutes(3)))
struct TenancyTests {
    static func attempt(_ connection: PostgresConnection, _ sql: String, db: TestDatabase) async -> String? {
        await RoleGrantTests.attempt(connection, sql, db: db)
    }

    static func strings(_ connection: PostgresConnection, _ sql: String, db: TestDatabase) async throws -> [String] {
        let rows = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: db.logger).collect()
        return try rows.map { try $0.decode(String.self) }
    }

    /// Two apps with a job, a device and a delivery each.
    static func twoApps(_ db: TestDatabase) async throws -> (a: Int64, b: Int64) {
        try await db.createApp("a")
        try await db.createApp("b")
        try await db.exec("SELECT push.register_device('a', \(TestTokens.token(1)), user_id => 'u1')")
        try await db.exec("SELECT push.register_device('b', \(TestTokens.token(2)), user_id => 'u1')")
        let a = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', idempotency_key => 'k')"#)
        let b = try await db.scalar(#"SELECT push.enqueue('b', '{"aps":{}}', idempotency_key => 'k')"#)
        try await db.exec("SELECT push.ensure_delivery_partitions(1)")
        try await db.exec("""
            INSERT INTO push.deliveries (job_id, app_id, token, status, attempt, sent_at)
            VALUES (\(a), 'a', \(TestTokens.token(1)), 200, 1, now()), (\(b), 'b', \(TestTokens.token(2)), 200, 1, now())
            """)
        return (a, b)
    }

    static let views = ["push.job_progress", "push.delivery_stats", "push.job_latency", "push.queue_backlog"]

    @Test func aGrantedProducerUsesItsAppsOnlyAndSeesNoOtherRows() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Self.twoApps(db)
            let user = try await db.createLogin(memberOf: "pgpush_producer")
            #expect(try await db.scalar("SELECT push.grant_app(\(user), 'a')::int") == 1)
            #expect(try await db.scalar("SELECT push.grant_app(\(user), 'a')::int") == 0, "granting twice changes nothing")
            let producer = try await db.connect(as: user)
            defer { Task { try? await producer.close() } }

            for sql in [
                #"SELECT push.enqueue('a', '{"aps":{}}')"#,
                #"INSERT INTO push.jobs (app_id, payload) VALUES ('a', '{"aps":{}}') RETURNING id"#,
                "SELECT push.register_device('a', '\(TestTokens.token(3))')",
                "SELECT push.cancel(\(jobs.a))",
            ] {
                let failure = await Self.attempt(producer, sql, db: db)
                #expect(failure == nil, "refused for its own app: \(sql): \(failure ?? "")")
            }
            for sql in [
                #"SELECT push.enqueue('b', '{"aps":{}}')"#,
                // The idempotency lookup would hand back app b's job id.
                #"SELECT push.enqueue('b', '{"aps":{}}', idempotency_key => 'k')"#,
                #"INSERT INTO push.jobs (app_id, payload) VALUES ('b', '{"aps":{}}')"#,
                "SELECT push.register_device('b', '\(TestTokens.token(4))')",
                // An app that does not exist gets the same answer as one that is not granted.
                #"SELECT push.enqueue('nope', '{"aps":{}}')"#,
            ] {
                let failure = await Self.attempt(producer, sql, db: db)
                #expect(failure?.contains("permission denied for app_id") == true, "allowed for another app: \(sql): \(failure ?? "nil")")
            }
            // Another app's job is as unknown as a job that does not exist, and stays queued.
            let cancel = await Self.attempt(producer, "SELECT push.cancel(\(jobs.b))", db: db)
            #expect(cancel?.contains("unknown job_id") == true, "\(cancel ?? "nil")")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(jobs.b) AND state = 'queued'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE app_id = 'b'") == 1, "nothing was enqueued for b")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE app_id = 'b'") == 1, "nothing was registered for b")

            for view in Self.views {
                let apps = try await Self.strings(producer, "SELECT DISTINCT app_id FROM \(view)", db: db)
                #expect(apps == ["a"], "\(view) shows \(apps)")
            }
        }
    }

    @Test func withoutGrantsProducersAndReadersSeeEveryAppAndRevokingTheLastGrantRestoresThat() async throws {
        try await TestDatabase.with { db in
            _ = try await Self.twoApps(db)
            let user = try await db.createLogin(memberOf: "pgpush_producer")
            let reader = try await db.createLogin(memberOf: "pgpush_reader")
            // Someone else's grant does not restrict these logins.
            let other = try await db.createLogin(memberOf: "pgpush_producer")
            try await db.exec("SELECT push.grant_app(\(other), 'b')")
            let producerConnection = try await db.connect(as: user)
            let readerConnection = try await db.connect(as: reader)
            defer { Task { try? await producerConnection.close(); try? await readerConnection.close() } }

            #expect(await Self.attempt(producerConnection, #"SELECT push.enqueue('b', '{"aps":{}}')"#, db: db) == nil)
            for view in Self.views {
                #expect(try await Self.strings(producerConnection, "SELECT DISTINCT app_id FROM \(view) ORDER BY 1", db: db) == ["a", "b"])
                #expect(try await Self.strings(readerConnection, "SELECT DISTINCT app_id FROM \(view) ORDER BY 1", db: db) == ["a", "b"])
            }

            // A reader can be restricted too; revoking its last grant gives it every app again.
            try await db.exec("SELECT push.grant_app(\(reader), 'a')")
            #expect(try await Self.strings(readerConnection, "SELECT DISTINCT app_id FROM push.job_progress", db: db) == ["a"])
            #expect(try await db.scalar("SELECT push.revoke_app(\(reader), 'a')::int") == 1)
            #expect(try await db.scalar("SELECT push.revoke_app(\(reader), 'a')::int") == 0)
            #expect(try await Self.strings(readerConnection, "SELECT DISTINCT app_id FROM push.job_progress ORDER BY 1", db: db) == ["a", "b"])
            #expect(try await db.scalar("SELECT count(*) FROM push.operator_audit WHERE action IN ('grant_app', 'revoke_app')") == 3)
        }
    }

    @Test func aGrantToAGroupRoleCoversItsMembersAndSetRole() async throws {
        try await TestDatabase.with { db in
            _ = try await Self.twoApps(db)
            // Roles are cluster-wide: a name of its own, so the test can run again on the same cluster.
            let team = "team_shop_\(UUID().uuidString.prefix(8).lowercased())"
            try await db.exec(PostgresQuery(unsafeSQL: "CREATE ROLE \(team) NOLOGIN IN ROLE pgpush_producer"))
            try await db.exec("SELECT push.grant_app(\(team), 'a')")
            let member = try await db.createLogin(memberOf: team)
            let connection = try await db.connect(as: member)
            defer { Task { try? await connection.close() } }
            #expect(try await Self.strings(connection, "SELECT DISTINCT app_id FROM push.job_progress", db: db) == ["a"])
            let failure = await Self.attempt(connection, #"SELECT push.enqueue('b', '{"aps":{}}')"#, db: db)
            #expect(failure?.contains("permission denied for app_id") == true)

            // An administrator's session that switches to the login is restricted like the login itself.
            let admin = try await db.connect(as: db.url.username)
            defer { Task { try? await admin.close() } }
            _ = try await admin.query(PostgresQuery(unsafeSQL: "SET ROLE \(member)"), logger: db.logger).collect()
            #expect(try await Self.strings(admin, "SELECT DISTINCT app_id FROM push.job_progress", db: db) == ["a"])
            _ = try await admin.query("RESET ROLE", logger: db.logger).collect()
            #expect(try await Self.strings(admin, "SELECT DISTINCT app_id FROM push.job_progress ORDER BY 1", db: db) == ["a", "b"])
        }
    }

    @Test func grantingNamesAnUnknownRoleOrApp() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let user = try await db.createLogin(memberOf: "pgpush_producer")
            let admin = try await db.connect(as: db.url.username)
            defer { Task { try? await admin.close() } }
            #expect(await Self.attempt(admin, "SELECT push.grant_app('nobody_here', 'a')", db: db)?.contains("unknown role_name: nobody_here") == true)
            #expect(await Self.attempt(admin, "SELECT push.grant_app('\(user)', 'zz')", db: db)?.contains("unknown app_id: zz") == true)
            #expect(try await db.scalar("SELECT count(*) FROM push.app_grants") == 0)
            // Producers cannot grant themselves anything.
            let producer = try await db.connect(as: user)
            defer { Task { try? await producer.close() } }
            #expect(await Self.attempt(producer, "SELECT push.grant_app('\(user)', 'a')", db: db)?.contains("permission denied") == true)
            #expect(await Self.attempt(producer, "SELECT * FROM push.app_grants", db: db)?.contains("permission denied") == true)
        }
    }
}
