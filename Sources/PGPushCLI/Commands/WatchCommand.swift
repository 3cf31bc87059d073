import ArgumentParser
import PGPushStore

struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Follow a job's progress until it ends.",
        discussion: """
            Polls push.job_progress. On a terminal it shows one live line (state, a bar, delivered, failed, \
            pruned and pending counts, sends per second and an ETA); otherwise it prints a plain line whenever \
            the numbers change, and a summary line when the job ends. For a job that reaches more than one \
            platform, delivered is split into iOS, Android and Web. A job with broadcast controls shows more: \
            capped (tokens whose person reached the category's frequency cap), the throttle in effect (max_rate \
            or spread_over, the lower of it and the app's rate limit), the estimated finish of a paced job, and \
            the tokens waiting for their zone's moment (local time, quiet hours) with the zones to come, \
            soonest first (UTC). --json prints one JSON object per poll \
            (JSON lines): job_id, app_id, state, total, delivered, failed, pruned, pending, expired, capped, \
            throttle, estimated_finish_at, waiting_tokens, waiting_zones (every one, as {"zone", "moment"}), and \
            for a job to several platforms ios_delivered, android_delivered and web_delivered.

            Examples:
              pgpush watch 42
              pgpush watch 42 --interval 5 --timeout 3600
              pgpush watch 42 --json | jq -c '{state, delivered}'

            Exit codes: 0 the job is done, 1 the job failed or a database error, 2 unknown job, \
            3 the job was cancelled, 124 --timeout passed before the job ended, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Argument(help: "The job id (as printed by `pgpush enqueue` or returned by push.enqueue).")
    var job: Int64

    @Option(help: "Seconds between polls.")
    var interval: Double = 1

    @Option(help: "Give up after this many seconds (exit 124). Default: wait as long as the job runs.")
    var timeout: Double?

    @Flag(help: "Print one JSON object per poll.")
    var json = false

    func validate() throws {
        try WatchCommand.validate(interval: interval, timeout: timeout)
    }

    static func validate(interval: Double, timeout: Double?) throws {
        guard interval >= 0.05, interval <= 3600 else {
            throw ValidationError("--interval must be between 0.05 and 3600 seconds")
        }
        if let timeout, !(timeout > 0) {
            throw ValidationError("--timeout must be a positive number of seconds")
        }
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.watch")
        let url = try database.resolve()
        try await reportingFailures {
            let watcher = JobWatcher(
                jobID: job, interval: .seconds(fromOption: interval), timeout: timeout.map(Duration.seconds(fromOption:)),
                output: JobWatcher.defaultOutput(json: json))
            try await withOperatorStore(url, logger: logger) { store in
                try await watcher.watch(on: store)
            }
        }
    }
}
