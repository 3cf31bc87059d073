import ArgumentParser
import Foundation
import Logging
import PGPushCLISupport
import PGPushStore
import PostgresNIO

struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "Manage registered device tokens and Web Push subscriptions.",
        subcommands: [DevicesAddCommand.self, DevicesImportCommand.self, DevicesSetBadgeCommand.self])
}

struct DevicesImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Bulk-register device tokens from a file (all or nothing).",
        discussion: """
            Formats: lines (one token per line; blank lines and # comments skipped), csv or tsv with a header \
            naming the columns token, user_id, tags, platform, locale, timezone (token required; tags separated by \
            | or ;; platform ios or android, --platform where empty or absent; locale a BCP 47 tag such as fr, \
            fr-CA, fr_CA or zh-Hant-TW, stored lowercase with - as push.normalize_locale gives it, e.g. fr-ca; \
            timezone an IANA zone PostgreSQL knows, such as Europe/Paris, which local-time sends and quiet hours \
            go by). Without \
            --format, .csv and .tsv files are read as such and anything else, stdin included, as lines.

            iOS tokens are lowercased and must be 64 to 200 hex characters; Android (FCM) registration tokens \
            are kept as given and must be 16 to 1024 of A-Z, a-z, 0-9, '_', '-' and ':'. A locale must match \
            ^[a-z]{2,3}(-[a-z0-9]{1,8})*$ once lowercased with _ as -, at most 35 characters, as \
            push.register_device requires. The whole file is checked first: one bad \
            line (named in the error) and nothing is imported. Then, in one transaction, the rows are copied \
            into a temporary table and upserted into push.devices: a token already registered gets the file's \
            user_id, tags, locale and timezone and a new registered_at, as push.register_device does. A column \
            the file does not have (a lines file has none of them) leaves the stored value alone, and so does an \
            empty locale or timezone: a device imported without one keeps the one it has. A timezone PostgreSQL \
            does not know is refused with its line, and nothing is imported. When a token appears twice, its \
            last line wins.

            Web Push subscriptions carry keys beside their endpoint, so they come in their own format, jsonl \
            (.jsonl or .ndjson, or --format jsonl): one JSON object per line, either the browser's \
            subscription.toJSON() itself or {"subscription": {…}, "user_id": "42", "tags": ["sports"], \
            "locale": "fr", "timezone": "Europe/Paris"}. Each subscription is checked as `pgpush devices add --subscription` checks one, and \
            the app must have Web Push configured. As with a csv column, when some line has user_id (or tags), \
            every device of the file gets its line's (none where a line has none).

            Examples:
              pgpush devices import tokens.txt --app news
              pgpush devices import export.csv --app news --json
              pgpush devices import fcm-tokens.txt --app news --platform android
              pgpush devices import subscriptions.jsonl --app news
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

    @Option(help: "lines, csv, tsv or jsonl (default: from the file name's extension).")
    var format: DeviceFileFormat?

    @Option(help: "ios or android: the platform of every device, unless a csv or tsv file has a platform column.")
    var platform: DevicePlatform = .ios

    @Flag(help: "Print the counts as JSON.")
    var json = false

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.devices")
        let url = try database.resolve()
        try await reportingFailures {
            let format = format ?? (file == "-" ? .lines : .guess(path: file))
            guard format == .jsonl || DeviceFile.importable.contains(platform) else { throw DeviceFile.webRefusal(line: nil) }
            guard let text = String(data: try readInput(file), encoding: .utf8) else {
                throw OperatorError(.failed, "\(file) is not UTF-8 text")
            }
            let parsed = try DeviceFile.parse(text, format: format, platform: platform)
            let imported = try await withOperatorStore(url, logger: logger) { store in
                if parsed.hasWebDevices, try await store.appHasWebPush(app) == false {
                    throw OperatorError(.failed, "app \(app) has no Web Push configured: give it a VAPID key first "
                        + "(`pgpush apps set-vapid \(app) --vapid-key FILE --vapid-subject mailto:…`); nothing was imported")
                }
                do {
                    return try await store.importDevices(
                        appID: app, records: parsed.records, replaceUserIDs: parsed.hasUserIDs, replaceTags: parsed.hasTags)
                } catch {
                    // Thrown inside the import's transaction, so wrapped by it.
                    let unknown = (error as? UnknownTimeZone) ?? ((error as? PostgresTransactionError)?.closureError as? UnknownTimeZone)
                    guard let unknown else { throw error }
                    throw OperatorError(.failed, "line \(unknown.line): timezone '\(unknown.timezone.prefix(64))' is not a time zone "
                        + "PostgreSQL knows: give an IANA name such as 'Europe/Paris'; nothing was imported")
                }
            }
            guard let result = imported else { throw OperatorError(.notFound, "unknown app \(app)") }
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

struct DevicesSetBadgeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-badge",
        abstract: "Set devices' badge counters (calls push.set_badge), by token or for every device of a user.",
        discussion: """
            The counter is what a job enqueued with --badge increment counts up from: each device gets its own \
            counter plus one. Set it when the app is opened (--value 0, the default, clears the badge) or to \
            the number of unread items. Give exactly one of --token (one device) and --user (each of the \
            user's devices). The database validates the arguments, and its message is printed as is.

            Prints how many devices were set (--json: {"app_id": …, "devices": N}).

            Examples:
              pgpush devices set-badge --app news --token 3f2a…
              pgpush devices set-badge --app news --user 42 --value 3 --json

            Exit codes: 0 set (a user without devices sets 0), 1 rejected by the database or a database error, \
            2 unknown app or unknown token, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "The app the devices belong to.")
    var app: String

    @Option(help: "Set this device token's counter.")
    var token: String?

    @Option(name: .customLong("user"), help: "Set the counter of each of this user's devices.")
    var user: String?

    @Option(help: "The counter's new value (default 0: no badge).")
    var value: Int32 = 0

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        if (token == nil) == (user == nil) { throw ValidationError("give exactly one of --token and --user") }
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.devices")
        let url = try database.resolve()
        try await reportingFailures {
            let changed = try await withOperatorStore(url, logger: logger) { store in
                do {
                    return try await store.setBadge(appID: app, token: token, userID: user, value: value)
                } catch let error as PSQLError where ["23503", "P0002"].contains(error.serverInfo?[.sqlState]) {
                    // push.set_badge raises foreign_key_violation for an unknown app, no_data_found for an
                    // unknown token.
                    throw OperatorError(.notFound, describeDatabaseError(error))
                }
            }
            if json {
                try printJSON(["app_id": app, "devices": changed] as [String: Any])
            } else {
                print("pgpush: set the badge of \(changed) \(changed == 1 ? "device" : "devices") of \(app) to \(value)")
            }
        }
    }
}
