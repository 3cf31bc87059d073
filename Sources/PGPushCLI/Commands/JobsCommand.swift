import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushStore

/// A job's state, as `push.jobs.state` has it.
enum JobStateFilter: String, CaseIterable, ExpressibleByArgument {
    case queued, running, done, failed, cancelled
}

struct JobsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jobs",
        abstract: "List jobs, newest first, by app, labels and state.",
        discussion: """
            Reads push.job_progress (a restricted login sees the jobs of its apps only). FAILED counts failed \
            and expired tokens, as push.job_progress does; CAPPED the tokens a frequency cap held back (not \
            failures); BY PLATFORM splits DELIVERED into iOS, Android and \
            Web for a job that reaches more than one of them; LABELS shows the job's labels as key=value pairs.

            --label KEY=VALUE keeps the jobs with that label; given more than once, a job must have every one \
            (labels @> '{"KEY": "VALUE", …}', served by the jobs_labels index). A value may contain '=' (the \
            first one splits) and may be empty; the key may not.

            --json prints one array of objects: job_id, app_id, state, total, delivered, ios_delivered, \
            android_delivered, web_delivered, failed, capped, pending, labels (an object, {} when none), \
            created_at.

            Examples:
              pgpush jobs
              pgpush jobs --label campaign=black-friday
              pgpush jobs --app news --label campaign=black-friday --label team=growth --state done
              pgpush jobs --state failed --limit 10 --json | jq '.[].job_id'

            Exit codes: 0 ok (also when no job matches), 1 database error, 2 unknown app, 64 bad usage.
            """)

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var logging: LoggingOptions

    @Option(help: "Only this app's jobs.")
    var app: String?

    @Option(
        name: .customLong("label"),
        help: ArgumentHelp("Only jobs with this label (repeatable: all must match).", valueName: "key=value"))
    var labels: [String] = []

    @Option(help: "Only jobs in this state (queued, running, done, failed or cancelled).")
    var state: JobStateFilter?

    @Option(help: "At most this many jobs (1 to 10000).")
    var limit: Int = 50

    @Flag(help: "Print JSON.")
    var json = false

    static let maxLimit = 10_000

    func validate() throws {
        _ = try Self.parseLabels(labels)
        guard (1...Self.maxLimit).contains(limit) else {
            throw ValidationError("--limit must be between 1 and \(Self.maxLimit): \(limit)")
        }
    }

    /// `KEY=VALUE` flags as one object; the first `=` splits, the key must not be empty, and a key given twice
    /// must have one value (a job's label has one).
    static func parseLabels(_ flags: [String]) throws -> [String: String] {
        var labels: [String: String] = [:]
        for flag in flags {
            guard let equals = flag.firstIndex(of: "=") else {
                throw ValidationError("--label must be KEY=VALUE, such as --label campaign=black-friday: \(flag)")
            }
            let key = String(flag[..<equals])
            let value = String(flag[flag.index(after: equals)...])
            guard !key.isEmpty else {
                throw ValidationError("--label has an empty key: give KEY=VALUE, such as --label campaign=black-friday: \(flag)")
            }
            if let other = labels[key], other != value {
                throw ValidationError("--label \(key) is given twice with different values (\(other), \(value)): a job's label has one value")
            }
            labels[key] = value
        }
        return labels
    }

    /// The labels as `k=v` pairs in key order, comma-separated; `nil` (shown as `-`) when there are none.
    static func labelsText(_ labels: [String: String]) -> String? {
        labels.isEmpty ? nil : labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
    }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.jobs")
        let url = try database.resolve()
        let wanted = try Self.parseLabels(labels)
        try await reportingFailures {
            let jobs = try await withOperatorStore(url, logger: logger) { store in
                if let app, try await !store.appExists(app) {
                    throw OperatorError(.notFound, "unknown app \(app)")
                }
                return try await store.listJobs(app: app, labels: wanted, state: state?.rawValue, limit: limit)
            }
            if json {
                try printJSON(jobs.map { job -> [String: Any] in
                    let object: [String: Any] = [
                        "job_id": job.jobID, "app_id": job.appID, "state": job.state, "total": jsonValue(job.total),
                        "delivered": job.delivered, "failed": job.failed, "capped": job.capped, "pending": job.pending,
                        "labels": job.labels,
                        "created_at": jsonValue(Timestamp.string(job.createdAt)),
                    ]
                    return object.merging(PlatformSplit(job).json) { first, _ in first }
                })
                return
            }
            guard !jobs.isEmpty else {
                print(app == nil && wanted.isEmpty && state == nil ? "no jobs" : "no jobs match")
                return
            }
            var table = Table(["ID", "APP", "STATE", "TOTAL", "DELIVERED", "BY PLATFORM", "FAILED", "CAPPED", "PENDING", "LABELS",
                               "CREATED"])
            for job in jobs {
                let split = PlatformSplit(job)
                table.append([
                    String(job.jobID), job.appID, job.state, job.total.map { String($0) }, String(job.delivered),
                    split.isMixed ? split.text : nil, String(job.failed), String(job.capped), String(job.pending), Self.labelsText(job.labels),
                    Timestamp.string(job.createdAt),
                ])
            }
            print(table.render())
        }
    }
}
