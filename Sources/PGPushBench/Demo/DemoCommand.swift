import ArgumentParser
import Foundation
import Logging
import PGPushCLISupport
import PGPushDevelopment

/// `pgpush demo`: the whole pipeline on one machine with one command.
public struct DemoCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run one broadcast end to end: throwaway PostgreSQL, APNs, FCM and Web Push simulators, workers, live progress, summary.",
        discussion: """
            Starts a throwaway PostgreSQL cluster (unless --database-url is given; needs the postgresql package),
            the APNs, FCM and Web Push simulators in this process, migrates, creates an app with a fresh P-256
            key, a fresh Firebase service account and a fresh VAPID key, registers --devices devices
            (--android-share of the live ones Android, 30 % by default; --web-share of them web subscriptions
            made on the Web Push simulator, 10 % by default; about 2 % dead: 410 Unregistered and registered
            long ago, or for web subscriptions 404/410 from the push service, so they are pruned; about 0.5 %
            malformed: 400 BadDeviceToken), enqueues one broadcast and starts --workers `pgpush worker`
            processes, which may send web messages to the simulator's origin only (--web-push-allow-origin).
            The first 1,000 web subscriptions are registered through push.register_device as a backend would,
            the rest inserted directly in batches. Progress is polled from push.job_progress every 250 ms. When
            the job ends and the pruner has caught up, the workers are stopped and a summary is printed: the
            job's counts, its audience and outcomes per platform, outcomes by platform, status and reason
            (push.delivery_stats), and what each simulator accepted (for Web Push, over which HTTP version).
            Then a Live Activity update goes to three running activities, and a broadcast channel is made on
            the simulator's channel management API, sent one broadcast and deleted.
            Everything is removed afterwards, also on error or Ctrl-C.

            Examples:
              swift run -c release pgpush demo
              pgpush demo --devices 2000 --workers 1
              pgpush demo --android-share 0 --web-share 0   # iOS only
              pgpush demo --web-share 0.5            # half the live devices are browsers
              pgpush demo --json | jq .job

            Exit codes: 0 the broadcast was delivered, 1 it failed or timed out, 130 interrupted, 64 bad usage.
            """)

    @Option(help: "PostgreSQL URL to use instead of a throwaway cluster (the demo adds an app and devices there).")
    var databaseUrl: String?

    @Option(help: "Devices to register (about 2 % dead, 0.5 % malformed).")
    var devices: Int = 200_000

    @Option(help: "Worker processes.")
    var workers: Int = 2

    @Option(help: "Share of the live devices that are Android, reached through the FCM simulator (0 = iOS only).")
    var androidShare: Double = 0.3

    @Option(help: "Share of the live devices that are web subscriptions, reached through the Web Push simulator (0 = none).")
    var webShare: Double = 0.1

    @Option(help: "Give up after this many seconds.")
    var timeout: Double = 600

    @Option(help: "Devices per chunk, passed to the workers.")
    var chunkSize: Int?

    @Flag(help: "Print the summary as JSON on standard output (progress goes to standard error).")
    var json = false

    public init() {}

    public func validate() throws {
        guard (1...50_000_000).contains(devices) else { throw ValidationError("--devices must be between 1 and 50000000") }
        guard (1...64).contains(workers) else { throw ValidationError("--workers must be between 1 and 64") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        guard (0...1).contains(androidShare) else { throw ValidationError("--android-share must be between 0 and 1") }
        guard (0...1).contains(webShare) else { throw ValidationError("--web-share must be between 0 and 1") }
        guard androidShare + webShare <= 1 else {
            throw ValidationError("--android-share and --web-share together are at most 1 (the rest of the live devices are iOS)")
        }
    }

    public func run() async throws {
        var logger = Logger(label: "pgpush.demo")
        logger.logLevel = .warning
        var rigConfiguration = BroadcastRig.Configuration(databaseURL: databaseUrl, appPrefix: "demo", logger: logger)
        rigConfiguration.withAndroid = androidShare > 0
        rigConfiguration.withWeb = webShare > 0
        if let chunkSize { rigConfiguration.workerArguments += ["--chunk-size", String(chunkSize)] }
        let rig = try BroadcastRig(configuration: rigConfiguration)
        var audience = BroadcastRig.Devices(
            count: devices, deadShare: 0.02, badShare: 0.005, androidShare: androidShare, webShare: webShare)
        audience.webThroughAPI = DemoPlan.webSubscriptionsThroughAPI
        let plan = DemoPlan(
            devices: audience, workers: workers,
            timeout: .seconds(fromOption: timeout), json: json)
        let summary: DemoSummary
        do {
            summary = try await runInterruptibly({ try await plan.run(on: rig) }, cleanup: { await rig.cleanup() })
        } catch is Interrupted {
            throw ExitCode(130)
        } catch {
            FileHandle.standardError.write(Data("pgpush demo: \(error)\n".utf8))
            throw ExitCode.failure
        }
        if json {
            try printJSON(summary.json)
        } else {
            print(summary.text)
        }
        guard summary.job.state == "done" else { throw ExitCode.failure }
    }
}

/// The demo's steps, separate from argument parsing.
struct DemoPlan: Sendable {
    /// Web subscriptions registered through `push.register_device`; the rest are inserted directly. The
    /// producer API checks each (its endpoint, that p256dh is a point on P-256) in about half a millisecond of
    /// the database's time, 10 s for the default demo's 19,500: the first 1,000 show the path, the rest are fast.
    static let webSubscriptionsThroughAPI = 1_000

    var devices: BroadcastRig.Devices
    var workers: Int
    var timeout: Duration
    var json: Bool

    func run(on rig: BroadcastRig) async throws -> DemoSummary {
        // With --json, standard output carries only the summary.
        let console = json ? FileHandle.standardError : FileHandle.standardOutput
        func say(_ text: String) { console.write(Data((text + "\n").utf8)) }
        let clock = ContinuousClock()
        let started = clock.now

        try await rig.setUp()
        say(rig.clusterDirectory.map { "pgpush demo: PostgreSQL in \($0), schema migrated, simulator running" }
            ?? "pgpush demo: schema migrated on the given database, simulator running")
        let setupStart = clock.now
        try await rig.registerDevices(devices)
        let web = devices.web + devices.webDead
        let webNote = web > 0
            ? ", \(web) web subscriptions, \(min(devices.webThroughAPI, web)) of them through push.register_device" : ""
        say("pgpush demo: registered \(devices.total) devices (\(devices.android) Android\(webNote), \(devices.dead) dead, \(devices.bad) malformed) "
            + "in \(String(format: "%.1f", (clock.now - setupStart).seconds)) s")

        let job = try await rig.enqueue()
        try rig.startWorkers(workers)
        say("pgpush demo: enqueued job \(job) for app \(rig.appID); \(workers) worker(s) started")

        var printer = ProgressPrinter(handle: console)
        _ = try await rig.waitForJob(job, interval: .milliseconds(250), timeout: timeout) { snapshot, seconds in
            printer.show(snapshot, atSeconds: seconds)
        }
        let remaining = max(.seconds(5), min(.seconds(30), timeout - (clock.now - started)))
        guard let final = try await rig.waitForPruning(job, timeout: remaining) else {
            throw EmbeddedError("job \(job) vanished")
        }
        // The broadcast's figures, before the Live Activity part adds its own sends.
        let (jobSeconds, outcomes, ledger, fcmLedger, webLedger) = (
            try await rig.database.jobDuration(job), try await rig.deliveryOutcomes(), rig.ledger, rig.fcmLedger, rig.webLedger)
        let platforms = try await rig.database.platformProgress(job)
        // Beside the broadcast: a Live Activity update and a channel broadcast (in-process simulator only).
        var liveActivities: DemoLiveActivities.Result?
        if rig.simulator != nil {
            liveActivities = try await DemoLiveActivities.run(on: rig, timeout: .seconds(30))
            liveActivities.map { $0.lines.forEach(say) }
        }
        let reports = await rig.stopWorkers()
        return DemoSummary(
            job: final,
            jobSeconds: jobSeconds,
            outcomes: outcomes,
            devices: devices,
            ledger: ledger,
            fcmLedger: fcmLedger,
            webLedger: webLedger,
            platforms: platforms,
            workers: reports,
            clusterDirectory: rig.clusterDirectory,
            liveActivities: liveActivities,
            elapsedSeconds: (clock.now - started).seconds)
    }
}
