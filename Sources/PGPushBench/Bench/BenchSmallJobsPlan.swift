import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PGPushSimulator

/// The steps of `pgpush bench small-jobs`, separate from argument parsing.
struct BenchSmallJobsPlan: Sendable {
    var jobs: Int
    var producers: Int
    var priority: Int
    var workers: Int
    var timeout: Duration
    var simulatorLatency: SimulatorLatency
    /// Where progress lines go; `nil` keeps quiet (JSON output).
    var progress: FileHandle?

    func run(on rig: BroadcastRig) async throws -> BenchSmallJobsReport {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        func say(_ text: String) { progress?.write(Data((text + "\n").utf8)) }

        try await rig.setUp()
        let users = (1...jobs).map { "u\($0)" }
        try await rig.registerUserDevices(count: jobs)
        try await rig.database.analyzeDevices()
        say("bench: \(jobs) devices registered, one user each")

        try rig.startWorkers(workers)
        try await rig.warmUpWorkers(timeout: deadline - clock.now)
        say("bench: \(workers) worker(s) registered and warmed up; \(producers) producers enqueue \(jobs) jobs")

        // The measured phase: from here to the SIGTERM of stopWorkers().
        let acceptedBefore = rig.ledger?.accepted
        let cpuBefore = rig.workerCPUSeconds()
        let enqueueStart = clock.now
        let ids = try await SmallJobProducers.burst(rig: rig, users: users, producers: producers, priority: priority)
        let enqueueSeconds = (clock.now - enqueueStart).seconds
        let committed = try await rig.database.databaseClock()
        say("bench: \(ids.count) jobs committed in \(String(format: "%.2f", enqueueSeconds)) s; waiting for them")
        var lastLine = clock.now
        let states = try await rig.waitForJobs(ids, interval: .milliseconds(200), timeout: deadline - clock.now) { states in
            guard clock.now - lastLine >= .seconds(1) else { return }
            lastLine = clock.now
            say("bench: \(BroadcastRig.describe(states))")
        }
        let acceptedAfter = rig.ledger?.accepted
        let reports = await rig.stopWorkers()

        let span = try await rig.database.jobsSpan(ids)
        let drain = try await rig.database.finished(ids, after: committed)
        let outcomes = try await rig.database.outcomeCounts(ids)
        let cpuAfter = reports.allSatisfy { $0.cpuSeconds != nil } ? reports.compactMap(\.cpuSeconds).reduce(0, +) : nil
        return BenchSmallJobsReport(
            jobs: ids.count,
            producers: producers,
            priority: priority,
            workers: workers,
            simulatorLatency: rig.configuration.externalSimulator == nil ? simulatorLatency : nil,
            enqueueSeconds: enqueueSeconds,
            spanSeconds: span,
            drainedJobs: Int(drain.jobs),
            drainSeconds: drain.seconds,
            latencySeconds: try await rig.database.firstSendLatencies(ids),
            states: states,
            outcomeRows: outcomes.rows,
            outcomeJobs: outcomes.jobs,
            workerReports: reports,
            workerCPUSeconds: both(cpuBefore, cpuAfter).map { $1 - $0 },
            simulatorAccepted: both(acceptedBefore, acceptedAfter).map { $1 - $0 })
    }
}

/// Both values, or `nil` if either is missing.
func both<A, B>(_ a: A?, _ b: B?) -> (A, B)? {
    guard let a, let b else { return nil }
    return (a, b)
}
