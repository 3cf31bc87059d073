import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// Renews this worker's leases (exactly the chunks it holds), its registry row and, when it leads, the
/// maintenance lease; re-divides rate limits by the live workers. It runs until the very end of a shutdown, so
/// the chunks still draining keep their leases.
struct HeartbeatService: Service {
    let worker: Worker

    func run() async {
        let configuration = worker.configuration
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let holding = Array(worker.heldChunks.withLock { $0 })
                    let live = try await worker.store.heartbeat(
                        lease: configuration.lease, liveWindow: configuration.heartbeatInterval * 3, holding: holding)
                    worker.health.withLock { $0.databaseAnswered(at: .now) }
                    worker.databaseAnswered()
                    await worker.registry.setLiveWorkers(live)
                } catch {
                    if Task.isCancelled { return }
                    worker.report(error, "heartbeat failed")
                }
                try? await Task.sleep(for: configuration.heartbeatInterval)
            }
        }
    }
}

/// The poll backstop: wakes the claim and expansion services every `pollInterval` even if no NOTIFY arrives.
/// Between two ticks it also wakes the claim as each chunk of a paced job comes due (a job's own rate, a zone's
/// local moment): no NOTIFY announces those, and a throttled job claimed a tick late would go out in bursts.
struct PollTicker: Service {
    let worker: Worker

    func run() async {
        let interval = worker.configuration.pollInterval
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                // A failed look is only a missed hint: the tick still comes.
                let due = (try? await worker.store.pacedChunksDue(within: interval)) ?? []
                var slept = Duration.zero
                for offset in due where offset < interval {
                    if offset > slept {
                        try? await Task.sleep(for: offset - slept)
                        slept = offset
                    }
                    worker.claimWake.signal()
                }
                if interval > slept { try? await Task.sleep(for: interval - slept) }
                worker.claimWake.signal()
                worker.expansionWake.signal()
            }
        }
    }
}
