import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PGPushSimulator

/// The steps of `pgpush bench broadcast`, separate from argument parsing.
struct BenchBroadcastPlan: Sendable {
    var devices: Int
    var workers: Int
    var latencySamples: Int
    var timeout: Duration
    /// Share of the devices that are Android (FCM).
    var androidShare: Double = 0
    /// Share of the devices that are web subscriptions (Web Push).
    var webShare: Double = 0
    /// Whether the broadcast is a Live Activity update to update tokens instead of an alert to devices.
    var liveActivity = false
    /// Whether the devices have locales and the broadcast has locale variants and increments their badges
    /// (``BroadcastRig/localizedAlerts``, ``BroadcastRig/deviceLocales``).
    var perDeviceContent = false
    /// The job's own rate (`push.enqueue(..., max_rate => N)`), or `nil` for as fast as the app goes.
    var maxRate: Int?
    /// The in-process simulator's answer delay, for the report; `nil` with an external simulator.
    var simulatorLatency: SimulatorLatency?
    /// h2load against the same endpoint before the broadcast, for the ratio; `nil` skips it.
    var h2load: H2LoadBaseline?
    /// Whether a process keeps one core busy through h2load and the broadcast (``CPUHog``).
    var cpuHog = false
    /// Where progress lines go; `nil` keeps quiet (JSON output).
    var progress: FileHandle?

    func run(on rig: BroadcastRig) async throws -> BenchBroadcastReport {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        func say(_ text: String) { progress?.write(Data((text + "\n").utf8)) }

        try await rig.setUp()
        let registering = clock.now
        var audience = BroadcastRig.Devices(count: devices, androidShare: androidShare, webShare: webShare)
        audience.activityTokens = liveActivity
        if perDeviceContent { audience.locales = BroadcastRig.deviceLocales }
        try await rig.registerDevices(audience)
        say("bench: \(devices) devices registered\(audience.web > 0 ? " (\(audience.web) web subscriptions)" : "") in "
            + "\(String(format: "%.1f", (clock.now - registering).seconds)) s")

        // From here to the end of the broadcast, another process may take one core, for h2load and the worker alike.
        let hog = cpuHog ? CPUHog.start(limit: deadline - clock.now) : nil
        defer { hog?.stop() }
        if hog != nil { say("bench: a process keeps one core busy (--cpu-hog)") }

        // The same run's baseline, while nothing else runs: h2load against the endpoint the workers will use.
        var baseline: H2LoadBaseline.Result?
        if let h2load {
            let result = try await rig.h2load(h2load, liveActivity: liveActivity)
            baseline = result
            say("bench: h2load \(result.label): \(Int(result.requestsPerSecond)) requests/s (\(result.succeeded) succeeded)")
        }

        // Phase 1: the broadcast, measured by the database's own timestamps.
        let postgresCPUBefore = rig.postgresCPUSeconds()
        try rig.startWorkers(workers)
        let job = liveActivity
            ? try await rig.enqueueActivityUpdate() : try await rig.enqueue(perDeviceContent: perDeviceContent, maxRate: maxRate)
        var printer = progress.map(ProgressPrinter.init(handle:))
        let final = try await rig.waitForJob(job, interval: .milliseconds(250), timeout: deadline - clock.now) {
            snapshot, seconds in printer?.show(snapshot, atSeconds: seconds)
        }
        let jobSeconds = try await rig.database.jobDuration(job)
        let web = audience.web > 0 ? try await rig.database.webSendSpan(job) : nil
        let (broadcastLedger, webLedger) = (rig.ledger, rig.webLedger)
        let broadcastWorkers = await rig.stopWorkers()
        let postgresCPUAfter = rig.postgresCPUSeconds()
        hog?.stop()
        if perDeviceContent, final.state == "done" {
            // The devices started at 0: each counter moved once, or the run did not measure what it says.
            let counters = try await rig.badgeCounters(at: 1)
            guard counters.devices == Int64(devices), counters.atValue == counters.devices else {
                throw EmbeddedError(
                    "per-device content: \(counters.atValue) of \(counters.devices) devices have badge counter 1 after the broadcast; each should have moved once from 0")
            }
        }

        // Phase 2: latency with fresh workers, so their statements and memory stay out of phase 1's figures.
        var latencies: [Double] = []
        if latencySamples > 0 {
            say("bench: measuring enqueue→first-send latency with \(latencySamples) one-token jobs")
            try rig.startWorkers(workers)
            // The first job opens the HTTP/2 connection and signs the provider token; it is not counted.
            _ = try await oneTokenLatency(rig: rig, index: 0, deadline: deadline)
            for index in 1...latencySamples {
                latencies.append(try await oneTokenLatency(rig: rig, index: index, deadline: deadline))
                try await Task.sleep(for: .milliseconds(100))
            }
            _ = await rig.stopWorkers()
        }
        return BenchBroadcastReport(
            devices: devices,
            androidShare: androidShare,
            webShare: webShare,
            liveActivity: liveActivity,
            perDeviceContent: perDeviceContent,
            workers: workers,
            simulatorLatency: simulatorLatency,
            jobState: final.state,
            tokens: final.processed,
            delivered: final.delivered,
            failed: final.failed,
            jobSeconds: jobSeconds,
            latencySeconds: latencies,
            workerReports: broadcastWorkers,
            postgresCPUSeconds: postgresCPUBefore.flatMap { before in postgresCPUAfter.map { $0 - before } },
            broadcastAccepted: broadcastLedger?.accepted,
            webMessages: web?.messages,
            webSeconds: web?.seconds,
            webLedger: webLedger,
            webPushAnsweredBy: audience.web == 0 ? nil : (rig.webSimulator == nil ? "nginx" : "simulator"),
            duplicates: rig.ledger?.duplicates,
            standIn: rig.configuration.nginxStandIn ? "nginx" : (rig.configuration.externalSimulator == nil ? "simulator" : "external simulator"),
            h2load: baseline,
            cpuHog: cpuHog)
    }

    /// Registers one fresh device (never a broadcast device, so the ledger sees no duplicate) with its own
    /// user id, enqueues a job for that user, waits until it is done and returns its enqueue→first-send
    /// latency in seconds. (A user audience rather than `tokens => …`: both are one-token jobs to the worker.)
    private func oneTokenLatency(rig: BroadcastRig, index: Int, deadline: ContinuousClock.Instant) async throws -> Double {
        let token = "fe" + String(format: "%062x", index)
        let user = "latency-\(index)"
        try await rig.database.registerDevice(appID: rig.appID, token: token, userID: user)
        let job = try await rig.enqueue(userIDs: [user])
        let limit = min(deadline, .now + .seconds(30))
        while ContinuousClock.now < limit {
            if let (state, latency) = try await rig.database.stateAndLatency(job) {
                if ["done", "failed", "cancelled"].contains(state) {
                    guard let latency else { throw EmbeddedError("latency job \(job) ended \(state) without a send") }
                    return latency
                }
            }
            try await rig.checkWorkersAlive()
            try await Task.sleep(for: .milliseconds(5))
        }
        let state = try await rig.snapshot(job: job).map { "\($0.state), \($0.pending) pending" } ?? "unknown"
        throw EmbeddedError("latency job \(job) did not finish in time (\(state)); worker log:\n\(rig.workerLogTail())")
    }
}
