import ArgumentParser
import Foundation
import PGPushCore
import PGPushStore

/// `--database-url`, falling back to `DATABASE_URL`.
struct DatabaseOptions: ParsableArguments {
    @Option(
        name: .customLong("database-url"),
        help: ArgumentHelp(
            "PostgreSQL URL, e.g. postgres://user:pass@host:5432/db?sslmode=require (env: DATABASE_URL).",
            valueName: "url"))
    var databaseURL: String?

    func resolve() throws -> DatabaseURL {
        guard let raw = databaseURL ?? ProcessInfo.processInfo.environment["DATABASE_URL"], !raw.isEmpty else {
            throw ValidationError("no database: pass --database-url or set DATABASE_URL")
        }
        do {
            return try DatabaseURL(raw)
        } catch {
            throw ValidationError(error.description)
        }
    }
}
