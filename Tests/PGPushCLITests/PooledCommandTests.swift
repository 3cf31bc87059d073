import Foundation
import PGPushTestSupport
import Testing

/// Every operator command through PgBouncer in transaction pooling (the one `scripts/test` starts), from a
/// database that `pgpush migrate` sets up through the pool.
@Suite("pgpush through PgBouncer", .timeLimit(.minutes(3)), .database)
struct PooledCommandTests {
    @Test("migrate, apps, devices, enqueue, watch, stats and prune work through transaction pooling")
    func operatorCommandsThroughThePool() async throws {
        try await TestDatabase.with(migrate: false) { db in
            let pooled = try db.pooledURLString()
            let migrate = try await CLIProcess.run(["migrate", "--database-url", pooled])
            #expect(migrate.status == 0, "\(migrate)")
            #expect(!migrate.stderr.contains("unsupported startup parameter"))
            let again = try await CLIProcess.run(["migrate", "--database-url", pooled])
            #expect(again.status == 0, "\(again)")
            #expect(try await db.scalar("SELECT count(*) FROM push.schema_migrations") >= 15)
            #expect(try await db.scalar("SELECT count(*) FROM push.leader_leases") == 0, "migration 0015 applied")

            let key = try temporaryFile("-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n", suffix: ".p8")
            defer { try? FileManager.default.removeItem(at: key) }
            let add = try await CLIProcess.run([
                "apps", "add", "news", "--database-url", pooled, "--topic", "com.example.news",
                "--team-id", "ABCDE12345", "--key-id", "KEY1234567", "--key-file", key.path,
            ])
            #expect(add.status == 0, "\(add)")
            let csv = try temporaryFile("token,user_id,tags\n\(TestTokens.token(1)),u1,a\n\(TestTokens.token(2)),u2,b\n", suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: csv) }
            let imported = try await CLIProcess.run(["devices", "import", csv.path, "--app", "news", "--database-url", pooled])
            #expect(imported.status == 0, "\(imported)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE app_id = 'news'") == 2)

            let enqueued = try await CLIProcess.run(["enqueue", "--app", "news", "--alert", "hi", "--database-url", pooled, "--json"])
            #expect(enqueued.status == 0, "\(enqueued)")
            let job = try #require((try enqueued.json() as? [String: Any])?["job_id"] as? NSNumber).int64Value
            let pause = try await CLIProcess.run(["apps", "pause", "news", "--reason", "maintenance window", "--database-url", pooled])
            #expect(pause.status == 0, "\(pause)")
            let resume = try await CLIProcess.run(["apps", "resume", "news", "--database-url", pooled])
            #expect(resume.status == 0, "\(resume)")
            try await db.exec("UPDATE push.jobs SET state = 'cancelled', finished_at = now() WHERE id = \(job)")
            let watch = try await CLIProcess.run(["watch", String(job), "--database-url", pooled, "--timeout", "20", "--json"])
            #expect(watch.status != 124 && watch.stdout.contains("cancelled"), "\(watch)")
            let stats = try await CLIProcess.run(["stats", "--database-url", pooled, "--json"])
            #expect(stats.status == 0, "\(stats)")
            let list = try await CLIProcess.run(["apps", "list", "--database-url", pooled, "--json"])
            #expect(list.status == 0 && list.stdout.contains("news"), "\(list)")
            let prune = try await CLIProcess.run(["prune", "--dry-run", "--database-url", pooled, "--json"])
            #expect(prune.status == 0, "\(prune)")
        }
    }
}
