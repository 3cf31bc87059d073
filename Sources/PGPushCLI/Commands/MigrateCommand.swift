import ArgumentParser
import PGPushCLISupport
import PGPushStore

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending schema migrations (safe to run from many processes at once).",
        discussion: """
            Applies the SQL files of Migrations/ (compiled into this binary) in order, each in its own
            transaction, and records them in push.schema_migrations. An advisory lock serialises concurrent
            runs. A recorded migration whose file changed is refused.

            Examples:
              pgpush migrate --database-url postgres://postgres@127.0.0.1:5432/push
              DATABASE_URL=postgres://postgres@db/push pgpush migrate --json

            Exit codes: 0 migrated (or nothing to do), 1 a migration failed or was changed, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "Apply the *.sql files of this directory instead of the embedded migrations.")
    var directory: String?

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.migrate")
        let url = try database.resolve()
        let migrations = try directory.map { try Migration.load(directory: $0) } ?? Migration.embedded
        try await reportingFailures {
            let report = try await withOperatorConnection(url, logger: logger) { connection in
                try await Migrator(migrations: migrations, logger: logger).migrate(connection: connection)
            }
            if json {
                try printJSON(["applied": report.applied, "already_applied": report.alreadyApplied])
            } else if report.applied.isEmpty {
                print("pgpush: schema is up to date (\(report.alreadyApplied.count) migrations applied earlier)")
            } else {
                print("pgpush: applied \(report.applied.count) migration(s): \(report.applied.joined(separator: ", "))")
            }
        }
    }
}
