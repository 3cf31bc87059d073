import Foundation
import Logging
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

@Suite(.timeLimit(.minutes(3)))
struct MigratorTests {
    @Test func everyFileInMigrationsIsEmbeddedInOrder() throws {
        let directory = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Migrations").path
        let onDisk = try Migration.load(directory: directory)
        #expect(onDisk.map(\.name) == Migration.embedded.map(\.name))
        #expect(onDisk.map(\.checksum) == Migration.embedded.map(\.checksum))
    }

    @Test(.database) func migratingTwiceAppliesNothingTheSecondTime() async throws {
        try await TestDatabase.with(migrate: false) { db in
            let first = try await Migrator(logger: db.logger).migrate(url: db.url)
            #expect(first.applied == Migration.embedded.map(\.version))
            let second = try await Migrator(logger: db.logger).migrate(url: db.url)
            #expect(second.applied.isEmpty)
            #expect(second.alreadyApplied == Migration.embedded.map(\.version))
            #expect(try await db.scalar("SELECT count(*) FROM push.schema_migrations") == Int64(Migration.embedded.count))
        }
    }

    /// Each migration's transaction takes the advisory lock and reads what is recorded under it, so four
    /// concurrent runs apply every migration exactly once, in order, between them.
    @Test(.database) func concurrentMigrationsAreSerialisedByTheAdvisoryLock() async throws {
        try await TestDatabase.with(migrate: false) { db in
            let reports = try await withThrowingTaskGroup(of: Migrator.Report.self) { group in
                for _ in 0..<4 {
                    group.addTask { try await Migrator(logger: db.logger).migrate(url: db.url) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let applied = reports.flatMap(\.applied)
            #expect(applied.count == Migration.embedded.count)
            #expect(Set(applied) == Set(Migration.embedded.map(\.version)))
            for report in reports {
                #expect(report.applied.count + report.alreadyApplied.count == Migration.embedded.count)
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.schema_migrations") == Int64(Migration.embedded.count))
            let order = try await db.rows("SELECT version FROM push.schema_migrations ORDER BY applied_at, version")
            var versions: [String] = []
            for try await version in order.decode(String.self) { versions.append(version) }
            #expect(versions == Migration.embedded.map(\.version), "applied in order")
        }
    }

    @Test(.database) func aChangedMigrationIsRefused() async throws {
        try await TestDatabase.with(migrate: false) { db in
            _ = try await Migrator(logger: db.logger).migrate(url: db.url)
            var edited = Migration.embedded
            edited[1].sql += "\n-- edited after release\n"
            do {
                _ = try await Migrator(migrations: edited, logger: db.logger).migrate(url: db.url)
                Issue.record("a changed migration was accepted")
            } catch let error as PGPushError {
                #expect(error.description.contains("0002_producer_api.sql was changed after it was applied"))
            }
        }
    }

    @Test(.database) func aFailingMigrationLeavesNoTraceAndIsNotRecorded() async throws {
        try await TestDatabase.with(migrate: false) { db in
            var migrations = Migration.embedded
            migrations.append(Migration(name: "9999_broken.sql", sql: "CREATE TABLE push.half_done (id int);\nSELECT no_such_function();"))
            do {
                _ = try await Migrator(migrations: migrations, logger: db.logger).migrate(url: db.url)
                Issue.record("a broken migration was accepted")
            } catch let error as PGPushError {
                #expect(error.description.contains("9999_broken.sql failed"))
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.schema_migrations WHERE version = '9999_broken'") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'push' AND tablename = 'half_done'") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.schema_migrations") == Int64(Migration.embedded.count))
        }
    }

    @Test func databaseURLParsesLibpqFormAndMasksThePassword() throws {
        let url = try DatabaseURL("postgres://push:s3cret@db.internal:6543/pushdb?sslmode=require&application_name=w1")
        #expect(url.host == "db.internal")
        #expect(url.port == 6543)
        #expect(url.username == "push")
        #expect(url.password == "s3cret")
        #expect(url.database == "pushdb")
        #expect(url.sslMode == .require)
        #expect(!url.description.contains("s3cret"))
        #expect(throws: PGPushError.self) { try DatabaseURL("mysql://x@y/z") }
        #expect(throws: PGPushError.self) { try DatabaseURL("postgres://x@y/z?sslmode=sometimes") }
    }
}
