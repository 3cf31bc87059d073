import Foundation
import Logging
import PGPushStore
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// LISTEN on one channel, on the listen client: new jobs wake the expansion (the poll is the backstop), and
/// cancels stop a cancelled job's chunks held here at their next token (the claim and the completion check
/// the job's state too; this makes the stop immediate).
///
/// LISTEN needs a session of its own: through PgBouncer in transaction pooling it is accepted but delivers
/// nothing. So once the jobs channel stands, the worker sends itself a probe through its statement client and
/// says so in the log if the probe never arrives.
struct ListenService: Service {
    enum Channel { case jobs, cancels }

    let listener: PostgresClient
    let channel: Channel
    /// Sends the probe, and names this worker in it.
    let store: any WorkerStore
    /// Woken by every new job, and whenever a LISTEN (re)starts.
    let expansionWake: Wake
    /// Told of cancelled jobs.
    let verdicts: JobVerdicts
    /// How often the worker polls without LISTEN (for the log).
    let pollInterval: Duration
    let logger: Logger

    static let probeWait: Duration = .seconds(5)

    func run() async {
        await cancelWhenGracefulShutdown {
            switch channel {
            case .jobs: await listenForJobs()
            case .cancels:
                await listen(on: QueueStore.cancelChannel) { payload in
                    if let job = Int64(payload) { verdicts.cancel(job) }
                }
            }
        }
    }

    private func listenForJobs() async {
        let (store, expansionWake, logger, pollInterval) = (self.store, self.expansionWake, self.logger, self.pollInterval)
        let probe = "probe:\(store.leaseOwner)"
        let heard = Atomic<Bool>(false)
        await listen(on: QueueStore.jobsChannel, whenListening: {
            guard !heard.load(ordering: .relaxed) else { return }
            try? await store.notify(QueueStore.jobsChannel, payload: probe)
            try? await Task.sleep(for: Self.probeWait)
            if !heard.load(ordering: .relaxed), !Task.isCancelled {
                logger.warning("LISTEN delivers no notifications (a transaction pooler in front?); new work is found by polling every \(pollInterval). Give --listen-database-url a direct or session-mode URL for immediate wake-ups")
            }
        }) { payload in
            if payload == probe { heard.store(true, ordering: .relaxed) }
            expansionWake.signal()
        }
    }

    private func listen(
        on channel: String, whenListening: (@Sendable () async -> Void)? = nil,
        _ received: @escaping @Sendable (String) -> Void
    ) async {
        let expansionWake = self.expansionWake
        var failures = 0
        while !Task.isCancelled {
            do {
                try await listener.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        failures = 0
                        // Whatever was committed while no LISTEN stood is found by the next poll.
                        expansionWake.signal()
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            if let whenListening { group.addTask { await whenListening() } }
                            for try await notification in notifications {
                                received(notification.payload)
                            }
                            group.cancelAll()
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                failures += 1
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("LISTEN failed; polling every \(pollInterval) until it is back", metadata: [
                        "channel": "\(channel)", "error": "\(LoggableError.describe(error))",
                    ])
                }
                try? await Task.sleep(for: RetryBackoff.after(failures))
            }
        }
    }
}
