import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// Renews this worker's leases (exactly the chunks it holds), its registry row and, when it leads, the
/// maintenance lease; re-divides rate limits by the live workers. It runs until the very end of a shutdown, so
/// the chunks still draining keep their leases.
struct HeartbeatService: Service {
    let store: any WorkerStore
    /// Whose held chunks are renewed.
    let lifecycle: WorkerLifecycle
    /// Told how many workers are live, to divide the apps' rate limits among them.
    let registry: any AppSenders
    let health: HealthMonitor
    let database: DatabaseReporter
    let lease: Duration
    let interval: Duration

    func run() async {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let live = try await store.heartbeat(lease: lease, liveWindow: interval * 3, holding: lifecycle.heldChunks)
                    health.databaseAnswered()
                    database.answered()
                    await registry.setLiveWorkers(live)
                } catch {
                    if Task.isCancelled { return }
                    database.report(error, "heartbeat failed")
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}

/// The poll backstop: wakes the claim and expansion services every `pollInterval` even if no NOTIFY arrives.
/// Between two ticks it also wakes the claim as each chunk of a paced job comes due (a job's own rate, a zone's
/// local moment): no NOTIFY announces those, and a throttled job claimed a tick late would go out in bursts.
struct PollTicker: Service {
    let store: any WorkerStore
    let claimWake: Wake
    let expansionWake: Wake
    let interval: Duration

    func run() async {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                // A failed look is only a missed hint: the tick still comes.
                let due = (try? await store.pacedChunksDue(within: interval)) ?? []
                var slept = Duration.zero
                for offset in due where offset < interval {
                    if offset > slept {
                        try? await Task.sleep(for: offset - slept)
                        slept = offset
                    }
                    claimWake.signal()
                }
                if interval > slept { try? await Task.sleep(for: interval - slept) }
                claimWake.signal()
                expansionWake.signal()
            }
        }
    }
}
