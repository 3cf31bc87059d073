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
struct PollTicker: Service {
    let worker: Worker

    func run() async {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: worker.configuration.pollInterval)
                worker.claimWake.signal()
                worker.expansionWake.signal()
            }
        }
    }
}
