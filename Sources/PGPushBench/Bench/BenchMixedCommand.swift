import ArgumentParser
import Foundation
import Logging
import PGPushCLISupport

/// `pgpush bench mixed`: a large broadcast and a steady stream of small, more urgent jobs at the same time —
/// do the small ones still go out quickly, and what do they cost the broadcast?
struct BenchMixedCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mixed",
        abstract: "Measure small jobs' latency while a broadcast runs, and the broadcast's throughput with and without them.",
        discussion: """
            Starts a throwaway PostgreSQL cluster (or uses --database-url) and the APNs simulator in this process,
            registers --devices devices tagged `bench` and rate × duration small-job devices (one user each, no
            tag), starts --workers `pgpush worker` processes and warms them up with one one-token job each.
            Phase 1 (skipped with --skip-solo): a broadcast to tag `bench` at --broadcast-priority, alone.
            Phase 2: the same broadcast again; once it has sent its first tokens, one small job
            (`push.enqueue(…, user_ids => ARRAY[u], priority => --priority)`, autocommit) is enqueued every
            1/--rate s for --duration s over 4 connections (a late job goes at once: the schedule catches up;
            none after --duration). The run waits for the broadcast and every small job.

            Figures:
              small latency   enqueue→first send (push.job_latency) p50/p90/p99/max of the small jobs
              during          small jobs created, and small jobs first sent, before the mixed broadcast's
                              finished_at
              tokens/s        broadcast outcomes ÷ (finished_at − started_at), alone and mixed, and their ratio
              producer lag    the longest a small job was enqueued after its due time (the producer's own
                              delay; large values mean the schedule was not kept)
              peak RSS        the largest VmHWM (/proc/<pid>/status) of the workers over both phases
              sim. latency    the in-process simulator's delay before each answer (--latency-ms)

            Examples:
              pgpush bench mixed
              pgpush bench mixed --devices 100000 --rate 200 --duration 10 --latency-ms 20-40 --json

            Exit codes: 0 measured and every job done, 1 otherwise (or timed out), 130 interrupted, 64 bad usage.
            """)

    @Option(help: "PostgreSQL URL to use instead of a throwaway cluster (PgBouncer in transaction pooling too). Other workers on it may claim the jobs.")
    var databaseUrl: String?

    @Option(help: "The workers' --listen-database-url: a direct or session-pooled URL when --database-url goes through PgBouncer; 'none' polls only.")
    var listenDatabaseUrl: String?

    @Option(help: "Devices of the broadcast (tag `bench`).")
    var devices: Int = 1_000_000

    @Option(help: "Small jobs per second during the broadcast.")
    var rate: Int = 500

    @Option(help: "Seconds of small-job traffic.")
    var duration: Double = 30

    @Option(help: "Priority of the small jobs.")
    var priority: Int = 10

    @Option(help: "Priority of the broadcast.")
    var broadcastPriority: Int = 0

    @Option(help: "Worker processes.")
    var workers: Int = 1

    @Option(help: "Devices per chunk (worker --chunk-size).")
    var chunkSize: Int?

    @Option(help: "HTTP/2 connections per app (worker --connections-per-app).")
    var connectionsPerApp: Int?

    @OptionGroup var simulatorLatency: SimulatorLatencyOptions
    @OptionGroup var databaseLatency: DatabaseLatencyOptions

    @Flag(help: "Skip phase 1 (the broadcast alone); no solo tokens/s or ratio.")
    var skipSolo = false

    @Option(help: "Give up after this many seconds.")
    var timeout: Double = 1800

    @Flag(help: "Print the report as JSON.")
    var json = false

    func validate() throws {
        guard (1...50_000_000).contains(devices) else { throw ValidationError("--devices must be between 1 and 50000000") }
        guard (1...100_000).contains(rate) else { throw ValidationError("--rate must be between 1 and 100000") }
        guard duration > 0, duration <= 86_400 else { throw ValidationError("--duration must be between 0 and 86400 seconds") }
        guard Double(rate) * duration <= 5_000_000 else {
            throw ValidationError("--rate × --duration must not exceed 5000000 small jobs")
        }
        guard Double(rate) * duration >= 1 else { throw ValidationError("--rate × --duration must be at least 1 small job") }
        for (flag, value) in [("--priority", priority), ("--broadcast-priority", broadcastPriority)] {
            guard (-1_000_000...1_000_000).contains(value) else {
                throw ValidationError("\(flag) must be between -1000000 and 1000000")
            }
        }
        guard (1...64).contains(workers) else { throw ValidationError("--workers must be between 1 and 64") }
        if let chunkSize, chunkSize < 1 { throw ValidationError("--chunk-size must be positive") }
        if let connectionsPerApp, connectionsPerApp < 1 { throw ValidationError("--connections-per-app must be positive") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        var configuration = BenchRun.rigConfiguration(
            mode: "mixed", databaseURL: databaseUrl, chunkSize: chunkSize, connectionsPerApp: connectionsPerApp,
            simulatorLatency: try simulatorLatency.latency,
            databaseRoundTrip: databaseLatency.roundTrip)
        if let listenDatabaseUrl { configuration.workerArguments += ["--listen-database-url", listenDatabaseUrl] }
        let plan = BenchMixedPlan(
            devices: devices, rate: rate, duration: duration, priority: priority, broadcastPriority: broadcastPriority,
            workers: workers, skipSolo: skipSolo, timeout: .seconds(fromOption: timeout),
            simulatorLatency: configuration.simulatorLatency, progress: json ? nil : FileHandle.standardError)
        let report = try await BenchRun.run(mode: "mixed", configuration: configuration, json: json) { try await plan.run(on: $0) }
        guard report.allDone else {
            FileHandle.standardError.write(Data("pgpush bench mixed: not every job is done\n".utf8))
            throw ExitCode.failure
        }
    }
}
