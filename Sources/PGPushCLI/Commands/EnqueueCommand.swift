import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushCore
import PGPushStore
import PostgresNIO

struct EnqueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Queue a broadcast (calls push.enqueue) and print its job id.",
        discussion: """
            Give the payload as JSON (--payload), a file (--payload-file, - for stdin) or just an alert text \
            (--alert), and for an app with FCM the Android message (--fcm or --fcm-file; derived from the \
            payload when absent; an Android-only app needs no payload), and for an app with Web Push the \
            browsers' message (--web or --web-file: the JSON the site's service worker receives, or a \
            Declarative Web Push object; derived from the payload's alert when absent; a Web-only app needs no \
            payload) with --web-urgency very-low, low, normal or high. The audience is at most one of --token, \
            --user or --tag (each repeatable); without one, \
            every device of the app. Per-device content: --localized (or --localized-file) gives locale variants, \
            a JSON object from BCP 47 tag to a partial payload merged over the job's (aps and custom keys, and \
            fcm for the Android message), each device getting its own locale's, else its language's, else the \
            job's; --badge increment sets each device's badge to its own counter plus one.

            Broadcast controls: --max-rate N sends at most N notifications a second for this job across the \
            fleet (to spare the producer's own servers when the devices wake up), or --spread-over "30 minutes" \
            spreads the audience over the interval (not both); --local-time 09:00 sends to each device at the \
            first 09:00 in its own time zone at or after --send-at; --respect-quiet-hours or \
            --ignore-quiet-hours overrides the default (the app's quiet hours hold back jobs below priority 10); \
            --category marketing counts the job against the app's frequency cap of that category.

            Alternatively --file reads a JSON object with push.enqueue's parameter \
            names (app_id, payload, fcm, web, web_urgency, push_type, tokens, user_ids, tags, send_at, expires_at, \
            collapse_id, idempotency_key, priority, apns_priority, localized, badge, max_rate, spread_over, \
            local_time, respect_quiet_hours, category, and for Live Activities activity_ids, \
            activity_type and channel). All values are sent as bound parameters; the database \
            validates them, and its message is printed as is.

            Prints the job id (--json: {"job_id": N}). With --wait it then follows the job like `pgpush watch`.

            Examples:
              pgpush enqueue --app news --alert "Breaking: …" --tag breaking
              pgpush enqueue --app news --payload '{"aps":{"alert":"Hi"}}' --token 3f2a… --ttl 3600
              pgpush enqueue --app news --payload-file promo.json --user 42 --user 43 --send-at 2026-12-01T09:00:00Z
              pgpush enqueue --file job.json --json --wait --timeout 600
              pgpush enqueue --app news --alert "Goal!" --fcm '{"notification":{"title":"Goal!"},"android":{"ttl":"600s"}}'
              pgpush enqueue --app news-android --fcm '{"data":{"refresh":"scores"}}'
              pgpush enqueue --app news --alert "Goal!" --localized '{"fr":{"aps":{"alert":"But !"}}}' --badge increment
              pgpush enqueue --app news --payload-file promo.json --localized-file promo-locales.json --tag promo
              pgpush enqueue --app news --alert "Goal!" --web '{"title":"Goal!","body":"2-1"}' --web-urgency high
              pgpush enqueue --app news-web --web '{"web_push":8030,"notification":{"title":"Goal!","navigate":"https://example.com/match/77"}}'
              pgpush enqueue --app news --alert "New episode" --max-rate 2000
              pgpush enqueue --app news --alert "Weekly digest" --spread-over "30 minutes" --category digest
              pgpush enqueue --app shop --alert "Sale starts" --local-time 09:00 --category marketing --tag promo

            Exit codes: 0 queued (with --wait: the job is done), 1 rejected by the database or a database \
            error (with --wait: the job failed), 2 unknown app, 3 with --wait: the job was cancelled, \
            124 --timeout passed, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "A JSON file with push.enqueue's parameters (instead of the options below).")
    var file: String?

    @Option(help: "The app id.")
    var app: String?

    @Option(help: "The payload as a JSON object, e.g. '{\"aps\":{\"alert\":\"Hi\"}}'.")
    var payload: String?

    @Option(help: "Read the payload JSON from this file (- for stdin).")
    var payloadFile: String?

    @Option(help: "Send {\"aps\":{\"alert\": TEXT}} as the payload.")
    var alert: String?

    @Option(help: "The Android (FCM) message: notification, data and android, without the target.")
    var fcm: String?

    @Option(help: "Read the Android (FCM) message JSON from this file (- for stdin).")
    var fcmFile: String?

    @Option(help: ArgumentHelp("The Web Push message: the JSON the site's service worker receives.", valueName: "json"))
    var web: String?

    @Option(help: "Read the Web Push message JSON from this file (- for stdin).")
    var webFile: String?

    @Option(help: ArgumentHelp("The Web Push Urgency: very-low, low, normal or high.", valueName: "urgency"))
    var webUrgency: WebPushUrgency?

    @Option(help: ArgumentHelp(
        "Locale variants as a JSON object from BCP 47 tag to a partial payload, e.g. '{\"fr\":{\"aps\":{\"alert\":\"Bonjour\"}}}'.",
        valueName: "json"))
    var localized: String?

    @Option(help: "Read the locale variants JSON from this file (- for stdin).")
    var localizedFile: String?

    @Option(help: ArgumentHelp("increment: each device's badge is its own counter plus one.", valueName: "mode"))
    var badge: String?

    @Option(help: "alert, background, voip, … (default alert).")
    var pushType: String?

    @Option(help: "10, 5 or 1 (default 10; 5 for background).")
    var apnsPriority: Int32?

    @Option(name: .customLong("token"), help: "Send to this device token (repeatable).")
    var tokens: [String] = []

    @Option(name: .customLong("user"), help: "Send to this user's devices (repeatable).")
    var users: [String] = []

    @Option(name: .customLong("tag"), help: "Send to devices with this tag (repeatable).")
    var tags: [String] = []

    @Option(help: "Do not send before this time (ISO 8601, e.g. 2026-12-01T09:00:00Z).")
    var sendAt: String?

    @Option(help: "Drop what is not sent by this time (ISO 8601).")
    var expiresAt: String?

    @Option(help: "Expire this many seconds after --send-at (or now).")
    var ttl: Double?

    @Option(help: "apns-collapse-id (at most 64 bytes).")
    var collapseID: String?

    @Option(help: "Enqueueing twice with the same key returns the first job.")
    var idempotencyKey: String?

    @Option(help: "Queue priority: higher goes first (default 0).")
    var priority: Int32?

    @Option(help: ArgumentHelp("At most this many notifications per second for this job, across the fleet.", valueName: "n"))
    var maxRate: Int32?

    @Option(help: ArgumentHelp("Spread the audience evenly over this interval, e.g. \"30 minutes\" (instead of --max-rate).", valueName: "interval"))
    var spreadOver: String?

    @Option(help: ArgumentHelp("Send to each device at this time of day (HH:MM) in its own time zone.", valueName: "HH:MM"))
    var localTime: String?

    @Flag(exclusivity: .exclusive)
    var quietHours: QuietHoursChoice?

    @Option(help: ArgumentHelp("The frequency-cap category this job counts against, e.g. marketing.", valueName: "name"))
    var category: String?

    @Flag(help: "Print JSON.")
    var json = false

    @Flag(help: "Follow the job's progress until it ends.")
    var wait = false

    @Option(help: "With --wait: give up after this many seconds (exit 124).")
    var timeout: Double?

    @Option(help: "With --wait: seconds between polls.")
    var interval: Double = 1

    func validate() throws {
        if file != nil {
            let conflicting = [app, payload, payloadFile, alert, pushType, sendAt, expiresAt, collapseID, idempotencyKey, fcm, fcmFile,
                               localized, localizedFile, badge, web, webFile, spreadOver, localTime, category]
                .contains { $0 != nil } || apnsPriority != nil || priority != nil || ttl != nil || webUrgency != nil
                || maxRate != nil || quietHours != nil
                || !tokens.isEmpty || !users.isEmpty || !tags.isEmpty
            if conflicting { throw ValidationError("--file carries the whole job: give no other job options with it") }
        } else {
            guard app != nil else { throw ValidationError("give --app (or --file)") }
            if fcm != nil, fcmFile != nil { throw ValidationError("give --fcm or --fcm-file, not both") }
            if localized != nil, localizedFile != nil { throw ValidationError("give --localized or --localized-file, not both") }
            if web != nil, webFile != nil { throw ValidationError("give --web or --web-file, not both") }
            if [payloadFile, fcmFile, localizedFile, webFile].filter({ $0 == "-" }).count > 1 {
                throw ValidationError("only one of --payload-file, --fcm-file, --localized-file and --web-file can read stdin (-)")
            }
            let payloads = [payload, payloadFile, alert].compactMap({ $0 }).count
            let otherMessage = fcm != nil || fcmFile != nil || web != nil || webFile != nil
            guard payloads == 1 || (payloads == 0 && otherMessage) else {
                throw ValidationError("give exactly one of --payload, --payload-file and --alert (an Android-only or Web-only app may give just --fcm or --web)")
            }
        }
        if expiresAt != nil, ttl != nil { throw ValidationError("give --expires-at or --ttl, not both") }
        if maxRate != nil, spreadOver != nil {
            throw ValidationError("give --max-rate or --spread-over, not both: --spread-over sets the rate to the audience over the interval")
        }
        if let localTime, !isLocalTime(localTime) {
            throw ValidationError("--local-time must be a time of day as HH:MM, 24-hour, such as 09:00 or 18:30: \(localTime)")
        }
        if let ttl, !(ttl > 0) { throw ValidationError("--ttl must be a positive number of seconds") }
        for (name, value) in [("--send-at", sendAt), ("--expires-at", expiresAt)] {
            if let value, Timestamp.parse(value) == nil {
                throw ValidationError("\(name) is not an ISO 8601 time (e.g. 2026-12-01T09:00:00Z): \(value)")
            }
        }
        if timeout != nil, !wait { throw ValidationError("--timeout only applies with --wait") }
        try WatchCommand.validate(interval: interval, timeout: timeout)
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.enqueue")
        let url = try database.resolve()
        try await reportingFailures {
            let request = try makeRequest()
            try await withOperatorStore(url, logger: logger) { store in
                let jobID: Int64
                do {
                    guard let id = try await store.enqueue(request) else {
                        throw OperatorError(.failed, "push.enqueue returned no job id")
                    }
                    jobID = id
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23503" {
                    // push.validate_job raises foreign_key_violation for an unknown app_id.
                    throw OperatorError(.notFound, describeDatabaseError(error))
                } catch let error as PSQLError where request.spreadOver != nil && Self.isIntervalRefusal(error) {
                    // PostgreSQL's own message for a malformed interval does not say which argument it was.
                    throw OperatorError(.failed, "spread_over \(request.spreadOver ?? "") is not an interval: write it as \"30 minutes\" or \"2 hours\" (\(describeDatabaseError(error)))")
                }
                if json {
                    try printJSON(["job_id": jobID])
                } else {
                    print(jobID)
                }
                flushStandardOutput()
                guard wait else { return }
                let watcher = JobWatcher(
                    jobID: jobID, interval: .seconds(fromOption: interval),
                    timeout: timeout.map(Duration.seconds(fromOption:)),
                    output: JobWatcher.defaultOutput(json: json))
                try await watcher.watch(on: store)
            }
        }
    }

    /// PostgreSQL refused an interval's text (the cast of spread_over): invalid_datetime_format,
    /// datetime_field_overflow, interval_field_overflow or invalid_text_representation, naming the interval type.
    static func isIntervalRefusal(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState], ["22007", "22008", "22015", "22P02"].contains(state) else { return false }
        return error.serverInfo?[.message]?.contains("interval") ?? false
    }

    private func makeRequest() throws -> EnqueueRequest {
        if let file {
            return try EnqueueRequest.load(jobFile: try readInput(file), name: file)
        }
        let payloadText: String?
        if let payload {
            payloadText = payload
        } else if let payloadFile {
            payloadText = String(decoding: try readInput(payloadFile), as: UTF8.self)
        } else if let alert {
            let data = try JSONSerialization.data(withJSONObject: ["aps": ["alert": alert]], options: [.sortedKeys])
            payloadText = String(decoding: data, as: UTF8.self)
        } else {
            payloadText = nil
        }
        let fcmText = try fcm ?? fcmFile.map { String(decoding: try readInput($0), as: UTF8.self) }
        let localizedText = try (localized ?? localizedFile.map { String(decoding: try readInput($0), as: UTF8.self) })
            .map { try EnqueueRequest.checkLocalized($0) }
        let webText = try (web ?? webFile.map { String(decoding: try readInput($0), as: UTF8.self) })
            .map { try EnqueueRequest.checkWeb($0) }
        return EnqueueRequest(
            appID: app ?? "", payload: payloadText, pushType: pushType, apnsPriority: apnsPriority,
            tokens: tokens.isEmpty ? nil : tokens, userIDs: users.isEmpty ? nil : users, tags: tags.isEmpty ? nil : tags,
            sendAt: sendAt.flatMap(Timestamp.parse), expiresAt: expiresAt.flatMap(Timestamp.parse), ttlSeconds: ttl,
            collapseID: collapseID, idempotencyKey: idempotencyKey, priority: priority, fcm: fcmText,
            localized: localizedText, badge: badge, web: webText, webUrgency: webUrgency?.rawValue, maxRate: maxRate,
            spreadOver: spreadOver, localTime: localTime, respectQuietHours: quietHours?.respects, category: category)
    }
}

/// The contents of a file named on the command line, `-` meaning standard input.
func readInput(_ path: String) throws -> Data {
    if path == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
    guard let data = FileManager.default.contents(atPath: path) else {
        throw OperatorError(.failed, "cannot read \(path)")
    }
    return data
}

extension WebPushUrgency: ExpressibleByArgument {}

/// `--respect-quiet-hours` or `--ignore-quiet-hours`: push.enqueue's respect_quiet_hours; neither leaves the
/// default (respected below priority 10).
enum QuietHoursChoice: String, EnumerableFlag {
    case respectQuietHours, ignoreQuietHours

    static func help(for value: QuietHoursChoice) -> ArgumentHelp? {
        switch value {
        case .respectQuietHours: "Hold devices inside the app's quiet hours until they end (the default below priority 10)."
        case .ignoreQuietHours: "Send through the app's quiet hours (the default from priority 10)."
        }
    }

    var respects: Bool { self == .respectQuietHours }
}

/// `HH:MM` (or `HH:MM:SS`), 24-hour: a local time of day for `--local-time` and a job file's `local_time`. PostgreSQL
/// would read more forms (`9am`), but its refusal of a bad one does not say which argument it was.
func isLocalTime(_ text: String) -> Bool {
    text.range(of: #"^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$"#, options: .regularExpression) != nil
}
