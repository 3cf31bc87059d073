import ArgumentParser
import Foundation
import PGPushSimulator

/// `pgpush bench soak`: mixed traffic with faults for a long time — does anything grow that should not, and
/// does every job still get exactly one outcome per token?
struct BenchSoakCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "Run broadcasts, one-token jobs and faults for --duration seconds; watch memory, descriptors, latency and table sizes.",
        discussion: """
            Starts a throwaway PostgreSQL cluster and the APNs simulator in this
            process, registers --devices devices tagged `bench` and --users
            devices with one user each, starts --workers `pgpush worker`
            processes at their default flags (maintenance every 5 s, 30 days'
            retention, retries from 5 s) and warms them up. Then, for --duration
            seconds:
              - a broadcast to the `bench` devices every --broadcast-every
                seconds, the first at once;
              - one-token jobs at --rate a second: push.enqueue(…, user_ids =>
                ARRAY[u], priority => --priority), autocommit, over 4
                connections, to the users in turn; a late job goes at once;
              - unless --no-faults: --error-rate of the simulator's answers are
                500 or 503 (half each); a GOAWAY on a connection every
                --goaway-every streams; PostgreSQL stopped (fast shutdown) at
                --postgres-restart-at of the run and started again on the same
                port and data directory after --postgres-downtime seconds; the
                first worker SIGTERMed at --worker-restart-at of the run,
                drained, and replaced by a new process (at least 1 s after
                PostgreSQL is back). Producer statements that fail while the
                server is down count as enqueue errors; the producers reconnect.
            Every --report-every seconds, and when the traffic ends, it samples
            (one line on standard error in text mode): one-token jobs finished
            in the interval and their enqueue→first send p50/p99; broadcast
            outcomes per second; jobs still queued or running; the workers' RSS
            (VmRSS) and open descriptors (/proc/<pid>/fd); table and index
            sizes of push.jobs, push.chunks, push.deliveries (all partitions)
            and push.devices, with their dead tuples (n_dead_tup). Then the
            producers stop, the queue drains (at most --drain-timeout seconds),
            the workers stop, and every job of the run is audited.

            Checks (the window is a sixth of the run, at most 600 s: for an
            hour, minute 10 and the first and last 10 minutes):
              rss           workers' RSS at the end ≤ 1.10 × at the sample
                            nearest the window's end (after the worker
                            restart, the end is the replacement's)
              p99           enqueue→first send p99 of the one-token jobs
                            enqueued in the last window ≤ 1.20 × that of the
                            first window
              fds           workers' open descriptors at the end ≤ at the
                            reference sample + 4 (connections being replaced
                            after a GOAWAY)
              tables        push.chunks (finished chunks are deleted) and
                            push.devices (nothing registers) at most double,
                            or grow by 16 MiB, from the reference sample.
                            push.jobs and push.deliveries keep every job and
                            outcome for the retention (30 days; daily
                            partitions, dropped whole): in a run they grow
                            with the traffic, reported per hour, not judged
              exactly_once  every job of the run finished, with one outcome
                            row per token it targeted: one-token jobs one
                            row, broadcasts --devices rows, no (job, token)
                            twice
            Samples taken while the server is down or a worker is being
            replaced lack those figures; the checks use the nearest that have
            them. A one-token job whose enqueue failed during the restart may
            have committed; the audit reads push.jobs, so it is checked too.

            Examples:
              pgpush bench soak --duration 3600 --latency-ms 30
              pgpush bench soak --duration 150 --devices 20000 \\
                --broadcast-every 30 --rate 100 --report-every 10 --json

            Exit codes: 0 every check passed; 1 a check failed (the report is
            printed) or the run could not finish; 130 interrupted; 64 bad usage.
            """)

    @Option(help: "Seconds of traffic.")
    var duration: Double = 3600

    @Option(help: "Devices of each broadcast (tag `bench`).")
    var devices: Int = 100_000

    @Option(help: "Seconds between broadcasts (the first goes at once).")
    var broadcastEvery: Double = 300

    @Option(help: "One-token jobs per second.")
    var rate: Int = 200

    @Option(help: "Users with one device each that the one-token jobs go to in turn.")
    var users: Int = 10_000

    @Option(help: "Priority of the one-token jobs (broadcasts have 0).")
    var priority: Int = 10

    @Option(help: "Seconds between samples (one line each in text mode).")
    var reportEvery: Double = 60

    @Option(help: "Worker processes.")
    var workers: Int = 1

    @OptionGroup var simulatorLatency: SimulatorLatencyOptions

    @Flag(help: "No faults: no 5xx, no GOAWAY, no PostgreSQL or worker restart.")
    var noFaults = false

    @Option(help: "Share of the simulator's answers that are 500 or 503.")
    var errorRate: Double = 0.02

    @Option(help: "GOAWAY on a connection every this many streams (0: never).")
    var goawayEvery: Int = 5000

    @Option(help: "Fraction of --duration at which PostgreSQL is stopped and started again (0: never).")
    var postgresRestartAt: Double = 0.4

    @Option(help: "Seconds PostgreSQL stays down.")
    var postgresDowntime: Double = 5

    @Option(help: "Fraction of --duration at which the first worker is SIGTERMed and replaced (0: never).")
    var workerRestartAt: Double = 0.6

    @Option(help: "Seconds to wait for the queue to drain after the traffic.")
    var drainTimeout: Double = 600

    @Flag(help: "Print the report, with every sample, as JSON.")
    var json = false

    func validate() throws {
        guard duration >= 5, duration <= 7 * 86_400 else { throw ValidationError("--duration must be between 5 and 604800 seconds") }
        guard (1...50_000_000).contains(devices) else { throw ValidationError("--devices must be between 1 and 50000000") }
        guard broadcastEvery >= 1 else { throw ValidationError("--broadcast-every must be at least 1 second") }
        guard duration / broadcastEvery <= 10_000 else { throw ValidationError("--duration ÷ --broadcast-every must not exceed 10000 broadcasts") }
        guard (1...100_000).contains(rate) else { throw ValidationError("--rate must be between 1 and 100000") }
        guard Double(rate) * duration <= 100_000_000 else { throw ValidationError("--rate × --duration must not exceed 100000000 jobs") }
        guard (1...10_000_000).contains(users) else { throw ValidationError("--users must be between 1 and 10000000") }
        guard (-1_000_000...1_000_000).contains(priority) else { throw ValidationError("--priority must be between -1000000 and 1000000") }
        guard reportEvery >= 1, reportEvery <= duration else { throw ValidationError("--report-every must be between 1 and --duration seconds") }
        guard (1...64).contains(workers) else { throw ValidationError("--workers must be between 1 and 64") }
        guard (0...1).contains(errorRate) else { throw ValidationError("--error-rate must be between 0 and 1") }
        guard goawayEvery >= 0 else { throw ValidationError("--goaway-every must not be negative") }
        guard (0..<1).contains(postgresRestartAt), (0..<1).contains(workerRestartAt) else {
            throw ValidationError("--postgres-restart-at and --worker-restart-at are fractions of --duration, from 0 (never) to below 1")
        }
        guard (0...300).contains(postgresDowntime) else { throw ValidationError("--postgres-downtime must be between 0 and 300 seconds") }
        if !noFaults, postgresRestartAt > 0, workerRestartAt > 0 {
            // A worker started while the server is down fails its start-up check: keep the two faults apart.
            let down = (postgresRestartAt * duration)..<(postgresRestartAt * duration + postgresDowntime + 1)
            guard !down.contains(workerRestartAt * duration) else {
                throw ValidationError("--worker-restart-at falls while PostgreSQL is down (--postgres-restart-at + --postgres-downtime + 1 s)")
            }
        }
        guard drainTimeout > 0, drainTimeout <= 86_400 else { throw ValidationError("--drain-timeout must be between 0 and 86400 seconds") }
    }

    func run() async throws {
        var configuration = BenchRun.rigConfiguration(
            mode: "soak", databaseURL: nil, chunkSize: nil, connectionsPerApp: nil,
            simulatorLatency: try simulatorLatency.latency)
        if !noFaults {
            configuration.simulatorFaults.serverErrorRate = errorRate
            configuration.simulatorFaults.goAwayEveryStreams = goawayEvery > 0 ? goawayEvery : nil
        }
        let plan = BenchSoakPlan(
            duration: duration, devices: devices, broadcastEvery: broadcastEvery, rate: rate, users: users,
            priority: priority, reportEvery: reportEvery, workers: workers, simulatorLatency: configuration.simulatorLatency,
            serverErrorRate: noFaults ? 0 : errorRate, goAwayEveryStreams: noFaults || goawayEvery == 0 ? nil : goawayEvery,
            postgresRestartAt: noFaults || postgresRestartAt == 0 ? nil : postgresRestartAt * duration,
            postgresDowntime: postgresDowntime,
            workerRestartAt: noFaults || workerRestartAt == 0 ? nil : workerRestartAt * duration,
            drainTimeout: drainTimeout, setupTimeout: .seconds(600), progress: json ? nil : FileHandle.standardError)
        let report = try await BenchRun.run(mode: "soak", configuration: configuration, json: json) { try await plan.run(on: $0) }
        guard report.passed else {
            let failed = report.checks.filter { !$0.passed }.map(\.name).joined(separator: ", ")
            FileHandle.standardError.write(Data("pgpush bench soak: checks failed: \(failed)\n".utf8))
            throw ExitCode.failure
        }
    }
}
