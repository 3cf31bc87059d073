import Logging
import PGPushCore
import PostgresNIO

/// Applies pending migrations in order, each in its own transaction, and records them in
/// `push.schema_migrations`. Each transaction takes a transaction-level advisory lock and reads what is
/// recorded under it, so concurrent runs (say, every worker of a deploy starting at once) are safe: the second
/// waits, then finds the migration recorded. Nothing depends on the session, so `pgpush migrate` works through
/// PgBouncer in transaction pooling as well as directly.
public struct Migrator: Sendable {
    /// What one run did.
    public struct Report: Sendable, Equatable {
        public var applied: [String]
        public var alreadyApplied: [String]
    }

    /// An arbitrary constant shared by every pgpush migrator; the advisory lock key space is per database.
    static let advisoryLockKey: Int64 = 0x7067_7075_7368_6d67

    public var migrations: [Migration]
    public var logger: Logger

    public init(migrations: [Migration] = Migration.embedded, logger: Logger) {
        self.migrations = migrations
        self.logger = logger
    }

    /// Connects with `url`, migrates, disconnects.
    public func migrate(url: DatabaseURL) async throws -> Report {
        let connection = try await PostgresConnection.connect(
            configuration: try url.connectionConfiguration(), id: 1, logger: logger)
        do {
            let report = try await migrate(connection: connection)
            try await connection.close()
            return report
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// Migrates over an existing connection.
    public func migrate(connection: PostgresConnection) async throws -> Report {
        try checkOrdering()
        var report = Report(applied: [], alreadyApplied: [])
        for migration in migrations {
            if try await apply(migration, on: connection) {
                report.applied.append(migration.version)
                logger.info("applied migration", metadata: ["migration": "\(migration.name)"])
            } else {
                report.alreadyApplied.append(migration.version)
            }
        }
        return report
    }

    private func checkOrdering() throws(PGPushError) {
        let versions = migrations.map(\.version)
        guard versions == versions.sorted(), Set(versions).count == versions.count else {
            throw PGPushError(.internal, "migrations must have unique names in ascending order")
        }
    }

    /// Applies `migration` unless it is recorded, in one transaction under the advisory lock; returns whether
    /// it applied it. A recorded migration whose file changed is refused.
    private func apply(_ migration: Migration, on connection: PostgresConnection) async throws -> Bool {
        do {
            _ = try await connection.query("BEGIN", logger: logger).collect()
            _ = try await connection.query("SELECT pg_advisory_xact_lock(\(Self.advisoryLockKey))", logger: logger).collect()
            _ = try await connection.query("CREATE SCHEMA IF NOT EXISTS push", logger: logger).collect()
            _ = try await connection.query("""
                CREATE TABLE IF NOT EXISTS push.schema_migrations (
                    version    text PRIMARY KEY,
                    checksum   text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, logger: logger).collect()
            let rows = try await connection.query(
                "SELECT checksum FROM push.schema_migrations WHERE version = \(migration.version)", logger: logger).collect()
            if let row = rows.first {
                _ = try await connection.query("COMMIT", logger: logger).collect()
                let checksum = try row.decode(String.self)
                guard checksum == migration.checksum else {
                    throw PGPushError(
                        .invalidConfiguration,
                        "migration \(migration.name) was changed after it was applied (recorded checksum \(checksum.prefix(12))…, file \(migration.checksum.prefix(12))…); add a new migration instead of editing an applied one")
                }
                return false
            }
            for statement in SQLScript.statements(migration.sql) {
                _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger).collect()
            }
            _ = try await connection.query("""
                INSERT INTO push.schema_migrations (version, checksum) VALUES (\(migration.version), \(migration.checksum))
                """, logger: logger).collect()
            _ = try await connection.query("COMMIT", logger: logger).collect()
            return true
        } catch let error as PGPushError {
            throw error
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger).collect()
            throw PGPushError(
                .databaseUnavailable,
                "migration \(migration.name) failed: \(Self.serverMessage(error))",
                underlying: error)
        }
    }

    static func serverMessage(_ error: any Error) -> String {
        if let error = error as? PSQLError, let message = error.serverInfo?[.message] {
            return message
        }
        return String(describing: error)
    }
}
