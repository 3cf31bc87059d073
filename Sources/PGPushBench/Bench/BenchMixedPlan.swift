import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PGPushSimulator

/// The steps of `pgpush bench mixed`, separate from argument parsing.
struct BenchMixedPlan: Sendable {
    var devices: Int
    var rate: Int
    var duration: Double
    var priority: Int
    var broadcastPriority: Int
    var workers: Int
    var skipSolo: Bool
    var timeout: Duration
    var simulatorLatency: SimulatorLatency
    /// Where progress lines go; `nil` keeps quiet (JSON output).
    var progress: FileHandle?

    static let tag = "bench"

    /// Small jobs the schedule holds: rate × duration.
    var smallJobs: Int { max(Int((Double(rate) * duration).rounded(.down)), 1) }

    func run(on rig: BroadcastRig) async throws -> BenchMixedReport {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        func say(_ text: String) { progress?.write(Data((text + "\n").utf8)) }

        try await rig.setUp()
        let registering = clock.now
        try await rig.registerTaggedDevices(count: devices, tags: [Self.tag])
        let users = (1...smallJobs).map { "u\($0)" }
        try await rig.registerUserDevices(count: smallJobs)
        try await rig.database.analyzeDevices()
        say("bench: \(devices) broadcast devices and \(smallJobs) small-job devices registered in "
            + String(format: "%.1f s", (clock.now - registering).seconds))
        try rig.startWorkers(workers)
        try await rig.warmUpWorkers(timeout: deadline - clock.now)

        // Phase 1: the broadcast alone, for the baseline.
        var solo: BenchMixedReport.Broadcast?
        if !skipSolo {
            say("bench: phase 1, the broadcast alone")
            solo = try await broadcast(on: rig, deadline: deadline)
        }

        // Phase 2: the same broadcast again, and small jobs at --rate once it is sending.
        say("bench: phase 2, the broadcast with \(rate) small jobs/s for \(duration) s")
        let job = try await rig.enqueue(tags: [Self.tag], priority: broadcastPriority)
        while try await !rig.database.hasSent(job) {
            guard clock.now < deadline else { throw EmbeddedError("broadcast \(job) sent nothing before the timeout") }
            try await rig.checkWorkersAlive()
            try await Task.sleep(for: .milliseconds(20))
        }
        async let pacedRun = SmallJobProducers.paced(
            rig: rig, users: users, rate: rate, duration: duration, priority: priority)
        let mixed = try await waitForBroadcast(job, on: rig, deadline: deadline)
        let paced = try await pacedRun
        say("bench: \(paced.jobIDs.count) small jobs enqueued in \(String(format: "%.1f", paced.seconds)) s; waiting for them")
        let states = try await rig.waitForJobs(paced.jobIDs, interval: .milliseconds(250), timeout: deadline - clock.now)
        let reports = await rig.stopWorkers()

        let overlap = try await rig.database.overlap(of: paced.jobIDs, withBroadcast: job)
        return BenchMixedReport(
            devices: devices, rate: rate, duration: duration, priority: priority, broadcastPriority: broadcastPriority,
            workers: workers,
            simulatorLatency: rig.configuration.externalSimulator == nil ? simulatorLatency : nil,
            smallJobsScheduled: paced.scheduled,
            smallJobsEnqueued: paced.jobIDs.count,
            enqueueSeconds: paced.seconds,
            maximumEnqueueLagSeconds: paced.maximumLagSeconds,
            smallJobStates: states,
            latencySeconds: try await rig.database.firstSendLatencies(paced.jobIDs),
            enqueuedDuringBroadcast: Int(overlap.0),
            sentDuringBroadcast: Int(overlap.1),
            solo: solo,
            mixed: mixed,
            workerReports: reports)
    }

    /// Enqueues the broadcast and waits for it.
    private func broadcast(on rig: BroadcastRig, deadline: ContinuousClock.Instant) async throws -> BenchMixedReport.Broadcast {
        let job = try await rig.enqueue(tags: [Self.tag], priority: broadcastPriority)
        return try await waitForBroadcast(job, on: rig, deadline: deadline)
    }

    private func waitForBroadcast(
        _ job: Int64, on rig: BroadcastRig, deadline: ContinuousClock.Instant
    ) async throws -> BenchMixedReport.Broadcast {
        var printer = progress.map(ProgressPrinter.init(handle:))
        let final = try await rig.waitForJob(job, interval: .milliseconds(250), timeout: deadline - .now) {
            snapshot, seconds in printer?.show(snapshot, atSeconds: seconds)
        }
        return BenchMixedReport.Broadcast(
            state: final.state, tokens: final.processed, seconds: try await rig.database.jobDuration(job))
    }
}
