import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// One maintenance task, run every ``MaintenanceTask/interval`` by its own ``MaintenanceService``, so a task
/// that fails or hangs never holds up another: a failed app reload never skips retention or pruning, and a
/// failed partition never leaves a drained job running.
struct MaintenanceTask: Sendable {
    let name: String
    let interval: Duration
    /// Tasks that must run once per database run on the maintenance leader only.
    let leaderOnly: Bool
    let step: @Sendable () async throws -> Void
}

/// Runs one ``MaintenanceTask`` until shutdown, as River runs each of its maintenance services: on its own
/// schedule, and failing alone. A failure is handed to `failed` (which logs it; a database outage once, for all
/// services) and the task runs again at its next interval; it neither stops nor delays any other task.
///
/// Schedule: the first pass after ``firstRunAfter``, then each pass ``MaintenanceTask/interval`` after the
/// previous one ended, plus a random share of ``jitter``. A leader-only task on a follower does not run; the
/// service looks again every ``leadershipLook`` (or its interval, if shorter), since the leadership may pass
/// to it at any heartbeat. Every wait is on the injected `clock`, so tests move time by hand.
struct MaintenanceService<ServiceClock: Clock>: Service where ServiceClock.Duration == Duration {
    let task: MaintenanceTask
    /// Whether this process leads maintenance now (the leadership task's last look); asked before each pass of
    /// a leader-only task.
    let isLeader: @Sendable () -> Bool
    /// Told of a pass that failed (not of one cut short by shutdown).
    let failed: @Sendable (_ error: any Error, _ task: MaintenanceTask) -> Void
    let clock: ServiceClock
    /// How long to wait before the first pass. The worker spreads its tasks over their interval, so their
    /// statements do not all reach the database at the same moment, beside the claims and writes of urgent jobs.
    var firstRunAfter: Duration = .zero
    /// At most this much is added to each wait, a random share of it each time (``random``); zero waits exactly
    /// the interval.
    var jitter: Duration = .zero
    /// A number in `0..<1`, the share of ``jitter`` a wait takes.
    var random: @Sendable () -> Double = { Double.random(in: 0..<1) }
    var leadershipLook: Duration = .milliseconds(100)

    func run() async {
        await cancelWhenGracefulShutdown {
            try? await clock.sleep(for: firstRunAfter)
            while !Task.isCancelled {
                guard !task.leaderOnly || isLeader() else {
                    try? await clock.sleep(for: min(task.interval, leadershipLook))
                    continue
                }
                await runOnce()
                try? await clock.sleep(for: nextWait())
            }
        }
    }

    /// The wait after a pass: the interval and a random share of the jitter.
    func nextWait() -> Duration {
        guard jitter > .zero else { return task.interval }
        return task.interval + jitter * min(max(random(), 0), 1)
    }

    /// Runs the task once; its failure ends only this pass. A pass's success proves nothing about writes (most
    /// tasks read, and a standby answers reads), so only the claim, the heartbeat and the result writer
    /// report the database available again.
    func runOnce() async {
        do {
            try await task.step()
        } catch {
            if Task.isCancelled { return }
            failed(error, task)
        }
    }
}

extension WorkerMaintenance {
    /// One ``MaintenanceService`` per task of ``MaintenanceTask/all(for:)``, their first passes spread over
    /// their interval, each wait jittered by ``WorkerConfiguration/maintenanceJitter``; a failed pass is
    /// reported to `database`.
    func services(reportingTo database: DatabaseReporter) -> [any Service] {
        let tasks = MaintenanceTask.all(for: self)
        let leadership = self.leadership
        return tasks.enumerated().map { index, task in
            MaintenanceService(
                task: task,
                isLeader: { leadership.isLeader },
                failed: { error, task in
                    database.report(error, "maintenance task failed; the others still run", metadata: ["task": "\(task.name)"])
                },
                clock: ContinuousClock(),
                firstRunAfter: task.interval * index / tasks.count,
                jitter: configuration.maintenanceJitter)
        }
    }
}
