import ArgumentParser
import Foundation
import Logging
import PGPushCLISupport
import PGPushSimulator

/// `pgpush bench broadcast`: one broadcast end to end through real workers, PostgreSQL and the simulator.
struct BenchBroadcastCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "broadcast",
        abstract: "Measure one broadcast end to end: tokens/s, enqueue→first-send latency, worker memory, SQL per token.",
        discussion: """
            Starts a throwaway PostgreSQL cluster (or uses --database-url), registers --devices live devices,
            runs the APNs simulator in this process (or uses --simulator-endpoint/--simulator-ca), enqueues one
            broadcast and starts --workers `pgpush worker` processes.

            Figures:
              tokens/s        outcomes ÷ (push.jobs.finished_at − started_at): first claim to last write
              latency p50/p99 enqueue→first send (push.job_latency) of --latency-samples one-token jobs, sent
                              one after another ~100 ms apart by a fresh set of idle, warmed-up workers
              peak RSS        the largest VmHWM (/proc/<pid>/status) of the broadcast's workers
              statements/1k   PostgreSQL statements of the broadcast's workers (from their `worker stopped`
                              log line: startup, polls and maintenance included) per 1,000 tokens
              PostgreSQL CPU  every server process's CPU (user + system, /proc: the postmaster, its live
                              children and those it reaped) from the workers' start to their stop, per
                              1,000 tokens; the throwaway cluster only
              simulator       accepted notifications and duplicated tokens (in-process simulator only)
              sim. latency    the in-process simulator's delay before each answer (--latency-ms)
              web messages/s  web outcomes ÷ (first claim → last web outcome's sent_at), with --web-share
              CPU per web msg the workers' CPU (user + system, start to stop) ÷ web messages, encryption
                              included; at --web-share 1 only, where every token is a web message

            Examples:
              pgpush bench broadcast --devices 1000000 --workers 1
              pgpush bench broadcast --devices 100000 --latency-ms 20-40
              pgpush bench broadcast --devices 100000 --workers 2 --chunk-size 2000 --json
              pgpush bench broadcast --devices 100000 --live-activity   # a Live Activity update to 100,000 update tokens
              pgpush bench broadcast --devices 200000 --stand-in nginx --h2load   # the worker against nginx, beside h2load
              pgpush bench broadcast --devices 200000 --latency-ms 30 --h2load --latency-samples 0   # full pipes at 30 ms
              pgpush bench broadcast --devices 100000 --per-device-content   # locale variants and badge increments
              pgpush bench broadcast --devices 100000 --web-share 1 --latency-samples 0   # browsers only
              pgpush bench broadcast --devices 100000 --web-share 1 --alternate-apns --rounds 3 --latency-samples 0

            --h2load runs h2load (-c4 -m100, as many requests as devices; with --latency-ms -c2 -m1000, a round
            trip's worth in flight) against the same endpoint right before the broadcast, and reports the
            broadcast's tokens/s as a share of h2load's requests/s. --cpu-hog keeps one core busy with another
            process through both, as a shared host would. --stand-in
            nginx sends to a throwaway nginx (a C HTTP/2 server that answers 200 and checks nothing) instead of
            the in-process simulator, so that neither side of the ratio pays for the simulator's checks.

            --per-device-content registers the devices with locales (en, fr, fr-ca, de, es, pt-br, ja in turn,
            every sixth none) and enqueues the broadcast with five locale variants of aps.alert, each about the
            default alert's size, and badge => 'increment': each device gets its locale's variant (fr-ca gets
            fr's; en and none get the job's alert) and its own badge counter plus one, which costs the worker a
            statement per chunk (the chunk's locales, the badge steps). The run fails unless every device's
            counter moved from 0 to 1. To see the cost, alternate runs with and without it in one session.

            --web-share X makes X of the live devices web subscriptions: made on a Web Push simulator in this
            process (it verifies every VAPID token and decrypts and ledgers every message, on the same cores as
            the worker), or with --stand-in nginx on the same nginx (it answers every POST 200 and reads nothing:
            the worker alone), and inserted in batches of 50,000. The app gets a fresh VAPID key and the workers
            --web-push-allow-origin for that origin only. --alternate-apns runs, after each such broadcast, the
            same broadcast to as many iOS devices (APNs only) on a fresh rig, --rounds times each, and prints
            every run and the medians: web messages/s and the worker's CPU per web message beside APNs
            tokens/s and CPU per token of the same session, and their ratio per round. --rounds N alone repeats
            the run. Each run has its own throwaway cluster and simulators.

            Exit codes: 0 measured, 1 the broadcast failed or timed out, 130 interrupted, 64 bad usage.
            """)

    @Option(help: "PostgreSQL URL to use instead of a throwaway cluster. Other workers on it may claim the job.")
    var databaseUrl: String?

    @Option(help: "Live devices to register and broadcast to.")
    var devices: Int = 1_000_000

    @Option(help: "Worker processes.")
    var workers: Int = 1

    @Option(help: "Devices per chunk (worker --chunk-size).")
    var chunkSize: Int?

    @Option(help: "HTTP/2 connections per app (worker --connections-per-app).")
    var connectionsPerApp: Int?

    @Option(help: "One-token jobs for the enqueue→first-send latency; 0 skips the measurement.")
    var latencySamples: Int = 50

    @Option(help: "An external simulator's base URL, e.g. https://127.0.0.1:2197 (needs --simulator-ca and a key).")
    var simulatorEndpoint: String?

    @Option(help: "The external simulator's CA file (PEM).")
    var simulatorCa: String?

    @Option(help: "With an external simulator: the .p8 key it trusts.")
    var keyFile: String?

    @Option(help: "With an external simulator: the key's 10-character team id.")
    var teamId: String?

    @Option(help: "With an external simulator: the key's 10-character key id.")
    var keyId: String?

    @OptionGroup var simulatorLatency: SimulatorLatencyOptions
    @OptionGroup var databaseLatency: DatabaseLatencyOptions

    @Option(help: "Share of the devices that are Android, sent through the in-process FCM simulator (1 = FCM only).")
    var androidShare: Double = 0

    @Option(help: "Share of the devices that are web subscriptions, sent through Web Push (1 = browsers only).")
    var webShare: Double = 0

    @Flag(help: "After each broadcast, run the same one to as many iOS devices (APNs only), alternately, and compare.")
    var alternateApns = false

    @Option(help: "Runs (with --alternate-apns: of each kind, alternating); more than 1 prints every run and the medians.")
    var rounds: Int = 1

    @Flag(help: "Register the devices as Live Activity update tokens and send them a liveactivity update instead of an alert.")
    var liveActivity = false

    @Flag(help: "Give the devices locales and the broadcast five locale variants and badge => 'increment' (each device its own message).")
    var perDeviceContent = false

    @Option(help: "The broadcast's own rate (push.enqueue max_rate): the run then measures the pace, not the speed.")
    var maxRate: Int?

    @Option(help: "What answers as APNs: simulator (in-process, checks everything) or nginx (a throwaway nginx that answers 200).")
    var standIn: APNsStandInKind = .simulator

    @Flag(help: "Run h2load (-c4 -m100; with --latency-ms -c2 -m1000) against the same endpoint first and report the broadcast's rate as a share of it.")
    var h2load = false

    @Flag(help: "Keep one core busy with another process through h2load and the broadcast, as a shared host would.")
    var cpuHog = false

    @Option(help: "Give up after this many seconds.")
    var timeout: Double = 1800

    @Flag(help: "Print the report as JSON.")
    var json = false

    func validate() throws {
        guard (1...50_000_000).contains(devices) else { throw ValidationError("--devices must be between 1 and 50000000") }
        guard (1...64).contains(workers) else { throw ValidationError("--workers must be between 1 and 64") }
        guard (0...10_000).contains(latencySamples) else { throw ValidationError("--latency-samples must be between 0 and 10000") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        if (simulatorEndpoint == nil) != (simulatorCa == nil) {
            throw ValidationError("--simulator-endpoint and --simulator-ca go together")
        }
        let keyFlags = [keyFile, teamId, keyId].compactMap { $0 }.count
        if simulatorEndpoint != nil, keyFlags != 3 {
            throw ValidationError("an external simulator needs --key-file, --team-id and --key-id (a key it trusts)")
        }
        if simulatorEndpoint == nil, keyFlags != 0 {
            throw ValidationError("--key-file, --team-id and --key-id only apply with --simulator-endpoint")
        }
        guard (0...1).contains(androidShare) else { throw ValidationError("--android-share must be between 0 and 1") }
        guard (0...1).contains(webShare) else { throw ValidationError("--web-share must be between 0 and 1") }
        guard androidShare + webShare <= 1 else {
            throw ValidationError("--android-share and --web-share together are at most 1 (the rest of the devices are iOS)")
        }
        guard (1...20).contains(rounds) else { throw ValidationError("--rounds must be between 1 and 20") }
        if alternateApns, webShare == 0 { throw ValidationError("--alternate-apns compares a broadcast with --web-share to APNs: give --web-share") }
        if alternateApns, androidShare > 0 { throw ValidationError("--alternate-apns compares web with APNs: leave out --android-share") }
        if webShare > 0 {
            if liveActivity { throw ValidationError("--live-activity is iOS only: leave out --web-share") }
            if simulatorEndpoint != nil { throw ValidationError("--web-share needs the in-process simulators, not --simulator-endpoint") }
            if h2load { throw ValidationError("--h2load measures the APNs endpoint: leave out --web-share") }
        }
        if liveActivity, androidShare > 0 { throw ValidationError("--live-activity is iOS only: leave out --android-share") }
        if let maxRate, maxRate <= 0 {
            throw ValidationError("--max-rate must be a positive number of notifications a second")
        }
        if liveActivity, perDeviceContent {
            throw ValidationError("--per-device-content increments badges, and a Live Activity has none: pick one")
        }
        if simulatorEndpoint != nil, androidShare > 0 {
            throw ValidationError("--android-share needs the in-process simulators, not --simulator-endpoint")
        }
        if standIn == .nginx {
            if simulatorEndpoint != nil { throw ValidationError("--stand-in nginx and --simulator-endpoint are two different servers: pick one") }
            if androidShare > 0 { throw ValidationError("--stand-in nginx stands in for APNs only: leave out --android-share") }
            if simulatorLatency.latencyMs != nil { throw ValidationError("--latency-ms applies to the in-process simulator, not to --stand-in nginx") }
        }
        if h2load {
            try H2LoadBaseline.checkInstalled()
            if androidShare > 0 { throw ValidationError("--h2load measures the APNs endpoint: leave out --android-share") }
        }
        if simulatorEndpoint != nil, simulatorLatency.latencyMs != nil {
            throw ValidationError("--latency-ms only applies to the in-process simulator, not with --simulator-endpoint")
        }
    }

    func run() async throws {
        guard rounds > 1 || alternateApns else {
            let steps = try plan(webShare: webShare)
            let report = try await BenchRun.run(mode: "broadcast", configuration: try rigConfiguration(webShare: webShare), json: json) {
                try await steps.run(on: $0)
            }
            guard report.jobState == "done" else { throw ExitCode.failure }
            return
        }
        // Rounds: each run on a fresh rig, the web broadcast and (with --alternate-apns) the APNs one in turn.
        var runs: [BenchBroadcastReport] = []
        series: for round in 1...rounds {
            for share in alternateApns ? [webShare, 0] : [webShare] {
                if !json {
                    FileHandle.standardError.write(Data(
                        "bench: round \(round) of \(rounds), \(share > 0 ? "web share \(share)" : "APNs only")\n".utf8))
                }
                let steps = try plan(webShare: share)
                let report = try await BenchRun.measure(mode: "broadcast", configuration: try rigConfiguration(webShare: share)) {
                    try await steps.run(on: $0)
                }
                if !json { FileHandle.standardError.write(Data((report.text + "\n").utf8)) }
                runs.append(report)
                guard report.jobState == "done" else { break series }
            }
        }
        let series = BenchBroadcastSeries(runs: runs)
        if json { try printJSON(series.json) } else { print(series.text) }
        guard runs.allSatisfy({ $0.jobState == "done" }) else { throw ExitCode.failure }
    }

    /// The rig of one run: web subscriptions when `webShare` > 0.
    private func rigConfiguration(webShare: Double) throws -> BroadcastRig.Configuration {
        var configuration = BenchRun.rigConfiguration(
            mode: "broadcast", databaseURL: databaseUrl, chunkSize: chunkSize, connectionsPerApp: connectionsPerApp,
            simulatorLatency: try simulatorLatency.latency,
            databaseRoundTrip: databaseLatency.roundTrip)
        if let simulatorEndpoint, let simulatorCa { configuration.externalSimulator = (simulatorEndpoint, simulatorCa) }
        if let keyFile, let teamId, let keyId { configuration.externalKey = (keyFile, teamId, keyId) }
        configuration.withAndroid = androidShare > 0
        configuration.withWeb = webShare > 0
        configuration.nginxStandIn = standIn == .nginx
        configuration.acceptsAnyTokenRefresh = h2load
        return configuration
    }

    /// The steps of one run.
    private func plan(webShare: Double) throws -> BenchBroadcastPlan {
        BenchBroadcastPlan(
            devices: devices, workers: workers, latencySamples: latencySamples, timeout: .seconds(fromOption: timeout),
            androidShare: androidShare, webShare: webShare, liveActivity: liveActivity, perDeviceContent: perDeviceContent,
            maxRate: maxRate,
            simulatorLatency: simulatorEndpoint == nil && standIn == .simulator ? try simulatorLatency.latency : nil,
            h2load: h2load ? try h2loadBaseline() : nil,
            cpuHog: cpuHog,
            progress: json ? nil : FileHandle.standardError)
    }

    /// h2load's shape: with answers after a delay, two connections of 1,000 streams each (a round trip's worth of
    /// requests in flight, as the worker may keep); without, `-c4 -m100`.
    private func h2loadBaseline() throws -> H2LoadBaseline {
        var baseline = H2LoadBaseline(requests: devices)
        if simulatorEndpoint == nil, standIn == .simulator, simulatorLatency.latencyMs != nil {
            (baseline.connections, baseline.streams) = (2, 1000)
        }
        return baseline
    }
}

/// What answers as APNs in an end-to-end bench.
enum APNsStandInKind: String, ExpressibleByArgument, CaseIterable, Sendable {
    /// The in-process APNs simulator: checks tokens, topics, payloads and provider tokens, keeps a ledger.
    case simulator
    /// A throwaway nginx that answers every request with 200 (``NginxAPNsStandIn``).
    case nginx
}
