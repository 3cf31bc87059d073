import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushStore

/// `pgpush apps set-broadcast-controls`: an app's default time zone, quiet hours and frequency caps.
struct AppsSetBroadcastControlsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-broadcast-controls",
        abstract: "Set an app's default time zone, quiet hours and frequency caps.",
        discussion: """
            Changes only what is given; the other controls keep their values.

            --default-timezone ZONE: the IANA zone (such as Europe/Paris) of the app's devices registered \
            without one; local-time sends (push.enqueue's local_time) and quiet hours go by it. The default is \
            UTC.

            --quiet-hours HH:MM-HH:MM: a daily window in each device's local time, such as 22:00-08:00 (one \
            that ends before it starts runs over midnight). A device inside it waits until it ends; nothing is \
            dropped, except by a job's expires_at. Jobs below priority 10 respect it unless enqueued with \
            respect_quiet_hours => false (`pgpush enqueue --ignore-quiet-hours`); priority 10 and above go \
            through unless told otherwise. --no-quiet-hours removes the window.

            --frequency-caps JSON (or --frequency-caps-file FILE, - for standard input): an object of \
            categories, each {"max": jobs, "per": "interval"}, such as {"marketing": {"max": 3, "per": "24 \
            hours"}}. It replaces the app's caps as a whole. A person (user_id; a device without one counts \
            alone) who already received max jobs of a category within per is not sent another one enqueued \
            with that category: their tokens get an outcome with status 0 and reason FrequencyCapped, counted \
            as capped. --no-frequency-caps removes them all.

            The database checks the result and names the field it refuses; its message is printed as is. \
            Prints the app's controls (--json: {"app_id", "default_timezone", "quiet_hours", \
            "frequency_caps"}).

            Examples:
              pgpush apps set-broadcast-controls news --default-timezone Europe/Paris --quiet-hours 22:00-08:00
              pgpush apps set-broadcast-controls shop --frequency-caps '{"marketing": {"max": 3, "per": "24 hours"}}'
              pgpush apps set-broadcast-controls news --no-quiet-hours --no-frequency-caps

            Exit codes: 0 set, 1 rejected by the database or a database error, 2 unknown app, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The app id.")
    var app: String

    @Option(help: ArgumentHelp("The IANA time zone of devices registered without one, such as Europe/Paris.", valueName: "zone"))
    var defaultTimezone: String?

    @Option(help: ArgumentHelp("A daily window in each device's local time, such as 22:00-08:00.", valueName: "HH:MM-HH:MM"))
    var quietHours: String?

    @Flag(help: "Remove the app's quiet hours.")
    var noQuietHours = false

    @Option(help: ArgumentHelp(
        "Caps per category as JSON, such as '{\"marketing\": {\"max\": 3, \"per\": \"24 hours\"}}'.", valueName: "json"))
    var frequencyCaps: String?

    @Option(help: ArgumentHelp("Read the frequency caps JSON from this file (- for stdin).", valueName: "file"))
    var frequencyCapsFile: String?

    @Flag(help: "Remove the app's frequency caps.")
    var noFrequencyCaps = false

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        if quietHours != nil, noQuietHours { throw ValidationError("give --quiet-hours or --no-quiet-hours, not both") }
        if [frequencyCaps != nil, frequencyCapsFile != nil, noFrequencyCaps].filter({ $0 }).count > 1 {
            throw ValidationError("give one of --frequency-caps, --frequency-caps-file and --no-frequency-caps")
        }
        if defaultTimezone == nil, quietHours == nil, !noQuietHours, frequencyCaps == nil, frequencyCapsFile == nil, !noFrequencyCaps {
            throw ValidationError("give at least one of --default-timezone, --quiet-hours, --no-quiet-hours, --frequency-caps, "
                + "--frequency-caps-file and --no-frequency-caps")
        }
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.apps")
        let url = try database.resolve()
        try await reportingFailures {
            let change = try makeChange()
            let controls = try await withOperatorStore(url, logger: logger) { store in
                try await store.setBroadcastControls(app, change)
            }
            guard let controls else { throw OperatorError(.notFound, "unknown app \(app)") }
            if json {
                try printJSON(controls.json(app: app))
            } else {
                print("pgpush: set the broadcast controls of \(app): \(controls.summary)")
            }
        }
    }

    private func makeChange() throws -> AppBroadcastControlsChange {
        var change = AppBroadcastControlsChange(defaultTimezone: defaultTimezone)
        if let quietHours { change.quietHours = .set(quietHours) } else if noQuietHours { change.quietHours = .clear }
        if let text = try frequencyCaps ?? frequencyCapsFile.map({ String(decoding: try readInput($0), as: UTF8.self) }) {
            // PostgreSQL's message for malformed JSON does not say which argument it was; what the caps mean is
            // the trigger's to judge, and it names the field.
            guard (try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])) != nil else {
                throw OperatorError(.failed, #"frequency_caps is not valid JSON: give an object of categories, such as {"marketing": {"max": 3, "per": "24 hours"}}"#)
            }
            change.frequencyCaps = .set(text)
        } else if noFrequencyCaps {
            change.frequencyCaps = .clear
        }
        return change
    }
}

extension AppBroadcastControls {
    /// `time zone Europe/Paris, quiet hours 22:00-08:00, frequency caps {"marketing": …}`.
    var summary: String {
        "time zone \(defaultTimezone), quiet hours \(quietHours ?? "none"), frequency caps \(frequencyCaps ?? "none")"
    }

    /// The controls for `--json`: the caps as an object, not as text.
    func json(app: String?) -> [String: Any] {
        var object: [String: Any] = [
            "default_timezone": defaultTimezone, "quiet_hours": jsonValue(quietHours),
            "frequency_caps": frequencyCaps.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } ?? NSNull(),
        ]
        if let app { object["app_id"] = app }
        return object
    }
}
