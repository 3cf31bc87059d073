import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushStore
import PostgresNIO

struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Delivery outcomes, queue backlog and recent jobs.",
        discussion: """
            Three tables: outcomes per day, app, platform (ios, android or web), HTTP status and reason \
            (push.delivery_stats; days are UTC), \
            the backlog of due work per app (push.queue_backlog) and the 20 most recent jobs \
            (push.job_progress; CAPPED counts the tokens a frequency cap held back, not failures). --json prints one object {"deliveries":[…],"backlog":[…],"jobs":[…]}.

            --since takes a duration back from now (30m, 24h, 7d, 2w) or an ISO 8601 date or time; outcomes \
            are counted per day, so the day it falls on is included whole.

            Examples:
              pgpush stats
              pgpush stats --app news --since 24h
              pgpush stats --since 2026-11-01 --json

            Exit codes: 0 ok, 1 database error, 2 unknown app, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "Only this app.")
    var app: String?

    @Option(help: "Outcomes since this long ago (30m, 24h, 7d, 2w) or since an ISO 8601 date (default 7d).")
    var since: String = "7d"

    @Flag(help: "Print one JSON object.")
    var json = false

    /// How many recent jobs the jobs table shows.
    static let recentJobs = 20

    func validate() throws {
        guard Self.parseSince(since, now: Date()) != nil else {
            throw ValidationError("--since must be a duration like 30m, 24h, 7d, 2w or an ISO 8601 date: \(since)")
        }
    }

    /// A start time from `24h`-style durations (s, m, h, d, w) or an ISO 8601 date or time.
    static func parseSince(_ text: String, now: Date) -> Date? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]
        if let unit = text.last, let scale = units[unit], let amount = Double(text.dropLast()), amount >= 0,
           amount.isFinite
        {
            return now.addingTimeInterval(-amount * scale)
        }
        return Timestamp.parse(text)
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.stats")
        let url = try database.resolve()
        try await reportingFailures {
            let start = Self.parseSince(since, now: Date()) ?? Date()
            let report = try await withOperatorStore(url, logger: logger) { store in
                if let app, try await !store.appExists(app) {
                    throw OperatorError(.notFound, "unknown app \(app)")
                }
                return try await StatsReport.load(from: store, app: app, since: start, jobLimit: Self.recentJobs)
            }
            if json {
                try printJSON(report.json)
            } else {
                print(report.text(since: start))
            }
        }
    }
}
