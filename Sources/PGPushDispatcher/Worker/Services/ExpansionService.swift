import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// Turns due jobs into chunks, apart from claiming so that neither waits for the other: small jobs in
/// batches, one statement each, until none is left; a broadcast's expansion as often as the
/// ``WorkerStateMachine`` says. Woken by NOTIFY, the poll tick and its own finds; it wakes the claim service
/// when it made work.
struct ExpansionService: Service {
    let worker: Worker

    static let smallJobBatch = 1000

    func run() async {
        await cancelWhenGracefulShutdown {
            var failures = 0
            for await _ in worker.expansionWake.signals {
                do {
                    try await expandWhenDue()
                    failures = 0
                } catch {
                    // Work already expanded keeps flowing: claiming does not wait for this service.
                    if Task.isCancelled { return }
                    failures += 1
                    worker.report(error, "expanding jobs failed")
                    try? await Task.sleep(for: Worker.backoff(failures))
                    worker.expansionWake.signal()
                }
            }
        }
    }

    private func expandWhenDue() async throws {
        while true {
            switch worker.machine.withLock({ $0.expansionWoken(at: .now) }) {
            case .expandAt(let instant):
                try await Task.sleep(until: instant, clock: .continuous)
            case .expand(let lookForLargeJob):
                try await expand(lookForLargeJob: lookForLargeJob)
                return
            default:
                return
            }
        }
    }

    private func expand(lookForLargeJob: Bool) async throws {
        let (store, chunkSize) = (worker.store, worker.configuration.chunkSize)
        while true {
            let expanded = try await store.expandDueSmallJobs(chunkSize: chunkSize, limit: Self.smallJobBatch)
            let (action, more) = worker.machine.withLock {
                ($0.smallJobsExpanded(expanded), $0.hasMoreSmallJobs(expanded, batch: Self.smallJobBatch))
            }
            worker.perform(action)
            if !more { break }
        }
        guard lookForLargeJob else { return }
        let expansion = try await store.expandNextDueJob(chunkSize: chunkSize, includingSmallJobs: false)
        worker.perform(worker.machine.withLock { $0.largeJobLooked(found: expansion != nil) })
        if let expansion {
            worker.logger.info("expanded job", metadata: [
                "job": "\(expansion.jobID)", "app": "\(expansion.appID)", "tokens": "\(expansion.total)", "chunks": "\(expansion.chunks)",
            ])
        }
    }
}
