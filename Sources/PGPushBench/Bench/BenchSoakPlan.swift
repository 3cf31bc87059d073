import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PGPushSimulator
import Synchronization

/// The steps of `pgpush bench soak`, separate from argument parsing.
struct BenchSoakPlan: Sendable {
    var duration: Double
    var devices: Int
    var broadcastEvery: Double
    var rate: Int
    var users: Int
    var priority: Int
    var reportEvery: Double
    var workers: Int
    var simulatorLatency: SimulatorLatency
    var serverErrorRate: Double
    var goAwayEveryStreams: Int?
    /// Seconds after the traffic starts at which PostgreSQL is stopped (`nil`: never), and for how long.
    var postgresRestartAt: Double?
    var postgresDowntime: Double
    /// Seconds after the traffic starts at which the first worker is SIGTERMed and replaced (`nil`: never).
    var workerRestartAt: Double?
    var drainTimeout: Double
    var setupTimeout: Duration
    /// Where the per-interval lines go; `nil` keeps quiet (JSON output).
    var progress: FileHandle?

    static let tag = "bench"
    static let tables = ["jobs", "chunks", "deliveries", "devices"]
    /// Tables whose size must stay bounded: finished chunks are deleted, devices are not added to.
    static let boundedTables = ["chunks", "devices"]

    /// The check windows: the first and the last sixth of the run, at most 10 minutes (minute 10 of an hour).
    var window: Double { min(600, duration / 6) }

    private func say(_ text: String) { progress?.write(Data((text + "\n").utf8)) }

    func run(on rig: BroadcastRig) async throws -> BenchSoakReport {
        let clock = ContinuousClock()
        let setupDeadline = clock.now + setupTimeout
        try await rig.setUp()
        let registering = clock.now
        try await rig.registerTaggedDevices(count: devices, tags: [Self.tag])
        try await rig.registerUserDevices(count: users)
        try await rig.database.analyzeDevices()
        say("soak: \(devices) broadcast devices and \(users) one-token users registered in "
            + String(format: "%.1f s", (clock.now - registering).seconds))
        try rig.startWorkers(workers)
        try await rig.warmUpWorkers(timeout: setupDeadline - clock.now)

        let start = clock.now
        let databaseStart = try await rig.database.now()
        say("soak: traffic for \(Int(duration)) s: \(rate) one-token jobs/s, a broadcast every \(Int(broadcastEvery)) s"
            + (postgresRestartAt.map { String(format: ", PostgreSQL restart at %.0f s", $0) } ?? "")
            + (workerRestartAt.map { String(format: ", worker restart at %.0f s", $0) } ?? ""))
        let producer = SoakProducer(
            rate: rate, duration: duration, priority: priority, users: (1...users).map { "u\($0)" })
        let events = SoakEvents(progress: progress)
        async let produced: Void = producer.run(rig: rig, start: start)
        async let postgresFault: Void = restartPostgres(on: rig, start: start, events: events)
        async let workerFault: Void = restartWorker(on: rig, start: start, events: events)
        var loop = SoakLoop(plan: self, rig: rig, producer: producer, start: start, databaseStart: databaseStart)
        try await loop.run(takeEvents: events.takePending)
        await produced
        try await postgresFault
        try await workerFault

        // The end: no more traffic; wait for the queue to drain, then stop the workers and audit.
        say("soak: traffic over; waiting up to \(Int(drainTimeout)) s for the queue to drain")
        let draining = clock.now
        let drained = try await drain(rig: rig, deadline: draining + .seconds(fromOption: drainTimeout))
        let drainSeconds = (clock.now - draining).seconds
        let reports = await rig.stopWorkers()
        _ = try? await rig.reconnectIfClosed()
        var audit: RigStore.OutcomeAudit?
        var auditError: String?
        do {
            audit = try await rig.database.auditOutcomes(appID: rig.appID, broadcastAudience: devices)
        } catch {
            auditError = "\(error)"
        }
        let broadcasts = try await broadcastStates(loop.broadcasts, rig: rig)
        let windowP99 = (
            first: try await rig.database.oneTokenLatencyP99(
                appID: rig.appID, from: databaseStart, to: databaseStart.addingTimeInterval(window)),
            last: try await rig.database.oneTokenLatencyP99(
                appID: rig.appID, from: databaseStart.addingTimeInterval(duration - window),
                to: databaseStart.addingTimeInterval(duration)))

        var report = BenchSoakReport(
            duration: duration, devices: devices, broadcastEvery: broadcastEvery, rate: rate, users: users, priority: priority,
            reportEvery: reportEvery, workers: workers, simulatorLatency: simulatorLatency, serverErrorRate: serverErrorRate,
            goAwayEveryStreams: goAwayEveryStreams, postgresRestartAt: postgresRestartAt, workerRestartAt: workerRestartAt,
            window: window, samples: loop.samples, events: events.all, broadcasts: broadcasts,
            producer: producer.snapshot, drained: drained, drainSeconds: drainSeconds, audit: audit, auditError: auditError,
            simulator: rig.simulatorStatistics, workerReports: reports, checks: [])
        report.checks = checks(samples: loop.samples, windowP99: windowP99, audit: audit)
        return report
    }

    // MARK: Faults

    /// Stops PostgreSQL at `postgresRestartAt` (fast shutdown: sessions are cut, a checkpoint is written), keeps it
    /// down for `postgresDowntime`, and starts it again on the same port and data directory.
    private func restartPostgres(
        on rig: BroadcastRig, start: ContinuousClock.Instant, events: SoakEvents
    ) async throws {
        guard let at = postgresRestartAt, let cluster = rig.cluster else { return }
        do { try await Task.sleep(until: start + .seconds(fromOption: at), clock: .continuous) } catch { return }
        let stopping = ContinuousClock.now
        try await offThread { try cluster.stopServer() }
        do { try await Task.sleep(for: .seconds(fromOption: postgresDowntime)) } catch {
            try? await offThread { try cluster.startServer() }
            return
        }
        try await offThread { try cluster.startServer() }
        let seconds = (ContinuousClock.now - stopping).seconds
        events.record(
            .init(kind: "postgres_restart", atSeconds: (stopping - start).seconds, seconds: seconds,
                  detail: ["port": String(cluster.port), "downtime_seconds": String(format: "%.1f", postgresDowntime)]),
            String(format: "PostgreSQL stopped and started again (down %.1f s)", seconds))
    }

    /// SIGTERMs the first worker at `workerRestartAt`, waits for it to drain and exit, and starts a replacement.
    private func restartWorker(
        on rig: BroadcastRig, start: ContinuousClock.Instant, events: SoakEvents
    ) async throws {
        guard let at = workerRestartAt else { return }
        do { try await Task.sleep(until: start + .seconds(fromOption: at), clock: .continuous) } catch { return }
        let stopping = ContinuousClock.now
        let (stopped, started) = try await rig.restartWorker()
        let seconds = (ContinuousClock.now - stopping).seconds
        events.record(
            .init(kind: "worker_restart", atSeconds: (stopping - start).seconds, seconds: seconds,
                  detail: ["stopped": stopped.id, "exit_status": String(stopped.exitStatus), "started": started]),
            "worker \(stopped.id) SIGTERMed, exited \(stopped.exitStatus) after \(String(format: "%.1f", seconds)) s; \(started) started")
    }

    // MARK: The end

    /// Polls until no job of the app is queued or running; `false` if that did not happen by `deadline`.
    private func drain(rig: BroadcastRig, deadline: ContinuousClock.Instant) async throws -> Bool {
        while true {
            do {
                try await rig.reconnectIfClosed()
                if try await rig.database.unfinishedJobs(appID: rig.appID) == 0 { return true }
            } catch {
                // The database may still be coming back; the deadline bounds the wait.
            }
            guard ContinuousClock.now < deadline else { return false }
            try await rig.checkWorkersAlive()
            try await Task.sleep(for: .milliseconds(500))
        }
    }

    private func broadcastStates(
        _ ids: [Int64], rig: BroadcastRig
    ) async throws -> [(id: Int64, state: String, total: Int64?, processed: Int64)] {
        var result: [(id: Int64, state: String, total: Int64?, processed: Int64)] = []
        for id in ids {
            if let snapshot = try await rig.snapshot(job: id) {
                result.append((id, snapshot.state, snapshot.total, snapshot.processed))
            }
        }
        return result
    }

    // MARK: Checks

    /// The issue's done-when checks, scaled to the run: see `BenchSoakCommand`'s discussion.
    func checks(
        samples: [BenchSoakReport.Sample], windowP99: (first: (jobs: Int, p99Seconds: Double?), last: (jobs: Int, p99Seconds: Double?)),
        audit: RigStore.OutcomeAudit?
    ) -> [BenchSoakReport.Check] {
        // The reference is the sample nearest the window's end, the end the last sample, each among those that
        // have the figure (none while a worker is being replaced or the server is down).
        func nearestWindow(where has: (BenchSoakReport.Sample) -> Bool) -> BenchSoakReport.Sample? {
            samples.filter(has).min { abs($0.atSeconds - window) < abs($1.atSeconds - window) }
        }
        func lastSample(where has: (BenchSoakReport.Sample) -> Bool) -> BenchSoakReport.Sample? { samples.last(where: has) }
        var checks: [BenchSoakReport.Check] = []

        var reference = nearestWindow { $0.rssKilobytes != nil }
        var end = lastSample { $0.rssKilobytes != nil }
        let referenceRSS = reference?.rssKilobytes, endRSS = end?.rssKilobytes
        let rssPassed = referenceRSS.flatMap { reference in endRSS.map { Double($0) <= Double(reference) * 1.10 } } ?? false
        checks.append(.init(
            name: "rss", passed: rssPassed,
            summary: "worker RSS at the end \(kb(endRSS)) ≤ 1.10 × at \(seconds(reference?.atSeconds)) \(kb(referenceRSS))",
            figures: ["reference_at_seconds": reference?.atSeconds, "reference_kb": referenceRSS.map { Double($0) },
                      "end_kb": endRSS.map { Double($0) }, "limit_ratio": 1.10]))

        let firstP99 = windowP99.first.p99Seconds.map { $0 * 1000 }, lastP99 = windowP99.last.p99Seconds.map { $0 * 1000 }
        let p99Passed = firstP99.flatMap { first in lastP99.map { $0 <= first * 1.20 } } ?? false
        checks.append(.init(
            name: "p99", passed: p99Passed,
            summary: "one-token p99 enqueued in the last \(seconds(window)) \(ms(lastP99)) ≤ 1.20 × in the first \(ms(firstP99))",
            figures: ["window_seconds": window, "first_p99_ms": firstP99, "last_p99_ms": lastP99,
                      "first_jobs": Double(windowP99.first.jobs), "last_jobs": Double(windowP99.last.jobs), "limit_ratio": 1.20]))

        reference = nearestWindow { $0.openFileDescriptors != nil }
        end = lastSample { $0.openFileDescriptors != nil }
        let referenceFDs = reference?.openFileDescriptors, endFDs = end?.openFileDescriptors
        let fdSlack = 4
        let fdPassed = referenceFDs.flatMap { reference in endFDs.map { $0 <= reference + fdSlack } } ?? false
        checks.append(.init(
            name: "fds", passed: fdPassed,
            summary: "worker open fds at the end \(endFDs.map(String.init) ?? "-") ≤ at \(seconds(reference?.atSeconds)) "
                + "\(referenceFDs.map(String.init) ?? "-") + \(fdSlack)",
            figures: ["reference_at_seconds": reference?.atSeconds, "reference": referenceFDs.map { Double($0) },
                      "end": endFDs.map { Double($0) }, "slack": Double(fdSlack)]))

        // Bounded: push.chunks (finished chunks are deleted) and push.devices (nothing registers during the run)
        // may at most double, or grow 16 MiB, from the reference sample. push.jobs and push.deliveries keep every
        // finished job and outcome for the retention (30 days, daily partitions): they grow with the traffic,
        // reported as growth per hour.
        reference = nearestWindow { $0.tables != nil }
        end = lastSample { $0.tables != nil }
        var tableFigures: [String: Double?] = ["reference_at_seconds": reference?.atSeconds, "end_at_seconds": end?.atSeconds]
        var boundedPassed = reference?.tables != nil && end?.tables != nil
        var parts: [String] = []
        for name in Self.tables {
            let before = reference?.table(name)?.totalBytes, after = end?.table(name)?.totalBytes
            tableFigures["\(name)_reference_bytes"] = before.map { Double($0) }
            tableFigures["\(name)_end_bytes"] = after.map { Double($0) }
            let hours = ((end?.atSeconds ?? 0) - (reference?.atSeconds ?? 0)) / 3600
            let perHour = before.flatMap { before in after.map { hours > 0 ? Double($0 - before) / hours : 0 } }
            tableFigures["\(name)_growth_bytes_per_hour"] = perHour
            if Self.boundedTables.contains(name) {
                let within = before.flatMap { before in after.map { $0 <= max(2 * before, before + (16 << 20)) } } ?? false
                boundedPassed = boundedPassed && within
                parts.append("\(name) \(mb(before))→\(mb(after))")
            } else {
                parts.append("\(name) +\(perHour.map { String(format: "%.1f", $0 / 1_048_576) } ?? "-") MB/h")
            }
        }
        checks.append(.init(
            name: "tables", passed: boundedPassed,
            summary: "chunks, devices ≤ max(2×, +16 MiB) of the reference: " + parts.joined(separator: ", "),
            figures: tableFigures))

        let exactlyOnce = audit?.exactlyOnce ?? false
        checks.append(.init(
            name: "exactly_once", passed: exactlyOnce,
            summary: audit.map {
                "\($0.jobs) jobs, \($0.unfinished) unfinished, \($0.outcomeRows) outcomes, \($0.duplicateOutcomes) duplicate, "
                    + "\($0.missingOutcomes) missing, \($0.jobsWithWrongCount) jobs off their total"
            } ?? "not audited",
            figures: ["jobs": audit.map { Double($0.jobs) }, "outcome_rows": audit.map { Double($0.outcomeRows) },
                      "duplicate_outcomes": audit.map { Double($0.duplicateOutcomes) },
                      "missing_outcomes": audit.map { Double($0.missingOutcomes) }]))
        return checks
    }

    private func kb(_ value: Int?) -> String { value.map { String(format: "%.1f MB", Double($0) / 1024) } ?? "-" }
    private func ms(_ value: Double?) -> String { value.map { String(format: "%.1f ms", $0) } ?? "-" }
    private func mb(_ value: Int64?) -> String { value.map { String(format: "%.1f MB", Double($0) / 1_048_576) } ?? "-" }
    private func seconds(_ value: Double?) -> String { value.map { String(format: "%.0f s", $0) } ?? "-" }
}

/// The soak's main loop: broadcasts on schedule, one sample per interval, a last one when the traffic ends.
/// Bounded by the run's duration; every statement that fails (the server is restarting) is tried again on the
/// next tick.
struct SoakLoop {
    let plan: BenchSoakPlan
    let rig: BroadcastRig
    let producer: SoakProducer
    let start: ContinuousClock.Instant
    private(set) var broadcasts: [Int64] = []
    private(set) var samples: [BenchSoakReport.Sample] = []
    private var previousSample: ContinuousClock.Instant
    private var previousDatabaseTime: Date?
    private var previousBroadcastTokens: Int64 = 0
    private var previousBroadcastAt: ContinuousClock.Instant
    private var previousProducer = SoakProducer.Counters()

    init(plan: BenchSoakPlan, rig: BroadcastRig, producer: SoakProducer, start: ContinuousClock.Instant, databaseStart: Date) {
        (self.plan, self.rig, self.producer, self.start) = (plan, rig, producer, start)
        (previousSample, previousBroadcastAt, previousDatabaseTime) = (start, start, databaseStart)
    }

    mutating func run(takeEvents: () -> [String]) async throws {
        let end = start + .seconds(fromOption: plan.duration)
        let totalBroadcasts = Int((plan.duration / plan.broadcastEvery).rounded(.up))
        var nextSample = start + .seconds(fromOption: plan.reportEvery)
        while true {
            let now = ContinuousClock.now
            let atEnd = now >= end
            if broadcasts.count < totalBroadcasts,
               now >= start + .seconds(fromOption: Double(broadcasts.count) * plan.broadcastEvery), !atEnd {
                do {
                    _ = try await rig.reconnectIfClosed()
                    broadcasts.append(try await rig.enqueue(tags: [BenchSoakPlan.tag]))
                } catch {
                    // The server is restarting; the next tick tries again.
                }
            }
            if atEnd || now >= nextSample {
                await sample(events: takeEvents())
                while nextSample <= now { nextSample = nextSample + .seconds(fromOption: plan.reportEvery) }
                if atEnd { return }
            }
            try await rig.checkWorkersAlive()
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    private mutating func sample(events: [String]) async {
        let now = ContinuousClock.now
        let counters = producer.snapshot
        var sample = BenchSoakReport.Sample(
            atSeconds: (now - start).seconds, intervalSeconds: (now - previousSample).seconds,
            enqueued: counters.enqueued - previousProducer.enqueued, enqueueErrors: counters.errors - previousProducer.errors,
            workers: rig.runningWorkers.map(Self.sampleWorker), events: events)
        previousSample = now
        previousProducer = counters
        rig.sampleWorkerMemory()
        do {
            _ = try await rig.reconnectIfClosed()
            let database = try rig.database
            let finished = try await database.finishedOneTokenJobs(appID: rig.appID, since: previousDatabaseTime)
            sample.oneTokenJobs = finished.jobs
            sample.oneTokenSeconds = previousDatabaseTime.map { finished.until.timeIntervalSince($0) }
            sample.p50Milliseconds = finished.p50Seconds.map { $0 * 1000 }
            sample.p99Milliseconds = finished.p99Seconds.map { $0 * 1000 }
            previousDatabaseTime = finished.until
            let tokens = try await database.processedTokens(broadcasts)
            let tokensAt = ContinuousClock.now
            sample.broadcastTokens = tokens - previousBroadcastTokens
            sample.broadcastSeconds = (tokensAt - previousBroadcastAt).seconds
            (previousBroadcastTokens, previousBroadcastAt) = (tokens, tokensAt)
            sample.unfinishedJobs = try await database.unfinishedJobs(appID: rig.appID)
            sample.tables = try await database.tableSizes(BenchSoakPlan.tables)
        } catch {
            sample.databaseError = "\(error)"
        }
        samples.append(sample)
        plan.progress?.write(Data((sample.line + "\n").utf8))
    }

    /// RSS and open descriptors of one worker, from /proc.
    static func sampleWorker(_ worker: WorkerProcess) -> BenchSoakReport.WorkerSample {
        let pid = worker.pid
        var rss: Int?
        if let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
           let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) {
            rss = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        }
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
        return .init(id: worker.id, pid: pid, rssKilobytes: rss, openFileDescriptors: fds)
    }
}

/// The faults the run injected, recorded from their own tasks; the main loop takes the new ones for its next
/// sample line.
final class SoakEvents: Sendable {
    private let state = Mutex<(all: [BenchSoakReport.Event], pending: [String])>(([], []))
    let progress: FileHandle?

    init(progress: FileHandle?) { self.progress = progress }

    func record(_ event: BenchSoakReport.Event, _ line: String) {
        state.withLock { $0.all.append(event); $0.pending.append(line) }
        progress?.write(Data(("soak: " + line + "\n").utf8))
    }

    var all: [BenchSoakReport.Event] { state.withLock { $0.all } }

    func takePending() -> [String] {
        state.withLock { state in
            defer { state.pending = [] }
            return state.pending
        }
    }
}

/// Runs a blocking call (a PostgreSQL tool through posix_spawn and waitpid) on a thread of its own, not on one
/// of the few threads of Swift's cooperative pool.
func offThread<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result(catching: { try body() })) }.start()
    }
}
