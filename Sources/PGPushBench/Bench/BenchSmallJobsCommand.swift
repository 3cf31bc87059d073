import ArgumentParser
import Foundation
import Logging
import PGPushCLISupport

/// `pgpush bench small-jobs`: many one-device jobs at once, the transactional-notification workload (a
/// message, a like, a login code), where per-job overhead matters more than tokens per second.
struct BenchSmallJobsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "small-jobs",
        abstract: "Measure many one-device jobs: jobs/s, enqueue→first-send latency, statements and CPU per job.",
        discussion: """
            Starts a throwaway PostgreSQL cluster (or uses --database-url) and the APNs simulator in this process,
            registers --jobs devices each with its own user id, starts --workers `pgpush worker` processes and
            waits until they are registered and have each sent one warm-up job (so connection setup and
            provider-token signing are not measured). Then --producers connections each enqueue their share of
            the jobs (`push.enqueue(…, user_ids => ARRAY[u], priority => --priority)`) in one transaction, and
            the run waits until every job has ended.

            Figures:
              jobs/s          jobs ÷ (max(finished_at) − min(created_at)) over the jobs; created_at is the
                              start of each producer's transaction
              draining        the jobs that finished after the last producer committed ÷ the time from
                              that commit (the database's clock) to the last finish: the worker's rate with
                              a queue and nothing more coming in
              latency         enqueue→first send (push.job_latency) min/p50/p99/max over the jobs; the
                              send time is that of the answer, so min ≥ the simulator's delay
              job states      every job must be done, and push.deliveries must hold exactly one row per job
              statements/job  the workers' PostgreSQL statements (their `worker stopped` log line) ÷ jobs: the
                              TOTAL, startup, warm-up, idle polls and maintenance included (the worker reports
                              no count at the start of the measured phase)
              CPU/job         the workers' user + system CPU (/proc/<pid>/stat) from just before the producers
                              start to just before SIGTERM, ÷ jobs, in µs
              peak RSS        the largest VmHWM (/proc/<pid>/status) of the workers
              simulator       notifications the in-process simulator accepted in the measured phase
              sim. latency    the in-process simulator's delay before each answer (--latency-ms)

            Examples:
              pgpush bench small-jobs
              pgpush bench small-jobs --jobs 5000 --producers 4 --latency-ms 20-40 --json

            Exit codes: 0 measured and every job done with one outcome, 1 otherwise (or timed out),
            130 interrupted, 64 bad usage.
            """)

    @Option(help: "PostgreSQL URL to use instead of a throwaway cluster (PgBouncer in transaction pooling too). Other workers on it may claim the jobs.")
    var databaseUrl: String?

    @Option(help: "The workers' --listen-database-url: a direct or session-pooled URL when --database-url goes through PgBouncer; 'none' polls only.")
    var listenDatabaseUrl: String?

    @Option(help: "One-device jobs to enqueue (one device and user each).")
    var jobs: Int = 20_000

    @Option(help: "Concurrent producer connections; each enqueues its share in one transaction.")
    var producers: Int = 10

    @Option(help: "Priority of the jobs (push.enqueue priority).")
    var priority: Int = 0

    @Option(help: "Worker processes.")
    var workers: Int = 1

    @Option(help: "Devices per chunk (worker --chunk-size).")
    var chunkSize: Int?

    @Option(help: "HTTP/2 connections per app (worker --connections-per-app).")
    var connectionsPerApp: Int?

    @OptionGroup var simulatorLatency: SimulatorLatencyOptions
    @OptionGroup var databaseLatency: DatabaseLatencyOptions

    @Option(help: "Give up after this many seconds.")
    var timeout: Double = 1800

    @Flag(help: "Print the report as JSON.")
    var json = false

    func validate() throws {
        guard (1...5_000_000).contains(jobs) else { throw ValidationError("--jobs must be between 1 and 5000000") }
        guard (1...100).contains(producers) else { throw ValidationError("--producers must be between 1 and 100") }
        guard producers <= jobs else { throw ValidationError("--producers must not exceed --jobs") }
        guard (-1_000_000...1_000_000).contains(priority) else {
            throw ValidationError("--priority must be between -1000000 and 1000000")
        }
        guard (1...64).contains(workers) else { throw ValidationError("--workers must be between 1 and 64") }
        if let chunkSize, chunkSize < 1 { throw ValidationError("--chunk-size must be positive") }
        if let connectionsPerApp, connectionsPerApp < 1 { throw ValidationError("--connections-per-app must be positive") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        var configuration = BenchRun.rigConfiguration(
            mode: "small-jobs", databaseURL: databaseUrl, chunkSize: chunkSize, connectionsPerApp: connectionsPerApp,
            simulatorLatency: try simulatorLatency.latency,
            databaseRoundTrip: databaseLatency.roundTrip)
        if let listenDatabaseUrl { configuration.workerArguments += ["--listen-database-url", listenDatabaseUrl] }
        let plan = BenchSmallJobsPlan(
            jobs: jobs, producers: producers, priority: priority, workers: workers,
            timeout: .seconds(fromOption: timeout), simulatorLatency: configuration.simulatorLatency,
            progress: json ? nil : FileHandle.standardError)
        let report = try await BenchRun.run(mode: "small-jobs", configuration: configuration, json: json) { try await plan.run(on: $0) }
        guard report.passed else {
            FileHandle.standardError.write(Data(
                "pgpush bench small-jobs: not every job is done with exactly one outcome\n".utf8))
            throw ExitCode.failure
        }
    }
}
