import ArgumentParser
import Foundation
import Logging
import PGPushStore
import PostgresNIO

struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "Manage registered device tokens.",
        subcommands: [DevicesImportCommand.self])
}

struct DevicesImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Bulk-register device tokens from a file (all or nothing).",
        discussion: """
            Formats: lines (one token per line; blank lines and # comments skipped), csv or tsv with a header \
            naming the columns token, user_id, tags, platform (token required; tags separated by | or ;; \
            platform ios or android, --platform where empty or absent). Without \
            --format, .csv and .tsv files are read as such and anything else, stdin included, as lines.

            iOS tokens are lowercased and must be 64 to 200 hex characters; Android (FCM) registration tokens \
            are kept as given and must be 16 to 1024 of A-Z, a-z, 0-9, '_', '-' and ':'. The whole file is \
            checked first: one bad \
            line (named in the error) and nothing is imported. Then, in one transaction, the rows are copied \
            into a temporary table and upserted into push.devices: a token already registered gets the file's \
            user_id and tags and a new registered_at, as push.register_device does. A column the file does not \
            have (a lines file has neither) leaves the stored value alone. When a token appears twice, its \
            last line wins.

            Examples:
              pgpush devices import tokens.txt --app news
              pgpush devices import export.csv --app news --json
              pgpush devices import fcm-tokens.txt --app news --platform android
              psql -Atc "SELECT token FROM legacy_devices" | pgpush devices import - --app news

            Exit codes: 0 imported, 1 a bad line or a database error (nothing imported), 2 unknown app, \
            64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The file to read, - for standard input.")
    var file: String

    @Option(help: "The app the devices belong to.")
    var app: String

    @Option(help: "lines, csv or tsv (default: from the file name's extension).")
    var format: DeviceFileFormat?

    @Option(help: "ios or android: the platform of every device, unless a csv or tsv file has a platform column.")
    var platform: DevicePlatform = .ios

    @Flag(help: "Print the counts as JSON.")
    var json = false

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.devices")
        let url = try database.resolve()
        try await reportingFailures {
            guard let text = String(data: try readInput(file), encoding: .utf8) else {
                throw OperatorError(.failed, "\(file) is not UTF-8 text")
            }
            let parsed = try DeviceFile.parse(text, format: format ?? (file == "-" ? .lines : .guess(path: file)), platform: platform)
            let result = try await withOperatorConnection(url, logger: logger) { connection in
                try await DeviceImport(appID: app, file: parsed).run(on: connection, logger: logger)
            }
            if json {
                try printJSON([
                    "app_id": app, "imported": result.inserted + result.updated, "inserted": result.inserted,
                    "updated": result.updated, "lines": parsed.records.count,
                ])
            } else {
                let merged = parsed.records.count - Int(result.inserted + result.updated)
                print("pgpush: imported \(result.inserted + result.updated) devices into \(app): \(result.inserted) new, "
                    + "\(result.updated) updated" + (merged > 0 ? " (\(merged) repeated tokens merged)" : ""))
            }
        }
    }
}

/// Loads parsed device records with COPY into a temporary table, then upserts them in the same transaction.
struct DeviceImport {
    var appID: String
    var file: DeviceFile

    struct Result: Sendable {
        var inserted: Int64
        var updated: Int64
    }

    /// Rows per COPY data message batch.
    static let batchBytes = 1 << 20

    func run(on connection: PostgresConnection, logger: Logger) async throws -> Result {
        try await connection.withTransaction(logger: logger) { connection in
            guard try await !connection.run("SELECT 1 FROM push.apps WHERE id = \(appID) FOR SHARE", logger: logger).isEmpty else {
                throw OperatorError(.notFound, "unknown app \(appID)")
            }
            guard !file.records.isEmpty else { return Result(inserted: 0, updated: 0) }
            try await connection.run("""
                CREATE TEMPORARY TABLE pgpush_device_import (line integer, token text, user_id text, tags text, platform text)
                ON COMMIT DROP
                """, logger: logger)
            let records = file.records
            try await connection.copyFrom(
                table: "pgpush_device_import", columns: ["line", "token", "user_id", "tags", "platform"], logger: logger
            ) { writer in
                var chunk = ""
                for record in records {
                    // Tags travel as a JSON array: no array-literal quoting rules to get wrong.
                    let tags = String(decoding: try JSONSerialization.data(withJSONObject: record.tags), as: UTF8.self)
                    chunk += CopyText.row([String(record.line), record.token, record.userID, tags, record.platform.rawValue])
                    if chunk.utf8.count >= Self.batchBytes {
                        try await writer.write(ByteBuffer(string: chunk))
                        chunk = ""
                    }
                }
                if !chunk.isEmpty { try await writer.write(ByteBuffer(string: chunk)) }
            }
            let rows = try await connection.run("""
                WITH upserted AS (
                    INSERT INTO push.devices AS d (app_id, token, user_id, tags, registered_at, platform)
                    SELECT DISTINCT ON (i.token) \(appID)::text, i.token, i.user_id,
                           ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)), now(), i.platform
                      FROM pgpush_device_import i
                     ORDER BY i.token, i.line DESC
                    ON CONFLICT (app_id, token) DO UPDATE
                       SET user_id = CASE WHEN \(file.hasUserIDs) THEN EXCLUDED.user_id ELSE d.user_id END,
                           tags = CASE WHEN \(file.hasTags) THEN EXCLUDED.tags ELSE d.tags END,
                           registered_at = EXCLUDED.registered_at, platform = EXCLUDED.platform
                    RETURNING (xmax = 0) AS inserted
                )
                SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted) FROM upserted
                """, logger: logger)
            let (inserted, updated) = try rows[0].decode((Int64, Int64).self)
            return Result(inserted: inserted, updated: updated)
        }
    }
}
