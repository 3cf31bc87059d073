import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// One maintenance task, run every ``MaintenanceTask/interval`` by its own ``MaintenanceService``, so a task
/// that fails or hangs never holds up another: a failed app reload never skips retention or pruning.
struct MaintenanceTask: Sendable {
    let name: String
    let interval: Duration
    /// Tasks that must run once per database run on the maintenance leader only.
    let leaderOnly: Bool
    let step: @Sendable () async throws -> Void
}

/// Runs one ``MaintenanceTask`` until shutdown. A failure is logged (a database outage once, for all
/// services) and the task runs again at its next interval.
struct MaintenanceService: Service {
    let worker: Worker
    let task: MaintenanceTask
    /// How long to wait before the first run. The tasks are spread over their interval, so their statements
    /// do not all reach the database at the same moment, beside the claims and writes of urgent jobs.
    var firstRunAfter: Duration = .zero

    static let leadershipLook: Duration = .milliseconds(100)

    func run() async {
        await cancelWhenGracefulShutdown {
            try? await Task.sleep(for: firstRunAfter)
            while !Task.isCancelled {
                // A follower looks again soon: the leadership may pass to it at any heartbeat.
                guard !task.leaderOnly || worker.isMaintenanceLeader.load(ordering: .relaxed) else {
                    try? await Task.sleep(for: min(task.interval, Self.leadershipLook))
                    continue
                }
                await runOnce()
                try? await Task.sleep(for: task.interval)
            }
        }
    }

    /// Runs the task once; its failure ends only this pass. A pass's success proves nothing about writes (most
    /// tasks read, and a standby answers reads), so only the claim, the heartbeat and the result writer
    /// report the database available again.
    func runOnce() async {
        do {
            try await task.step()
        } catch {
            if Task.isCancelled { return }
            worker.report(error, "maintenance task failed; the others still run", metadata: ["task": "\(task.name)"])
        }
    }
}
