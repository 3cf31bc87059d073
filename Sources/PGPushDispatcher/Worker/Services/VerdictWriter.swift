import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// Writes the decisions the chunks reach about whole apps and jobs: pauses after repeated configuration
/// errors (``AppHealth``) and job failures after job-level errors (``JobVerdicts``). A write that fails while
/// the database is down is kept and tried again when next woken (every turn of the claim service).
struct VerdictWriter: Service {
    let store: any WorkerStore
    /// Woken every turn of the claim service.
    let wake: Wake
    /// The pauses the chunks decided.
    let appHealth: AppHealth
    /// The job failures the chunks decided.
    let verdicts: JobVerdicts
    let logger: Logger

    func run() async {
        await cancelWhenGracefulShutdown {
            for await _ in wake.signals {
                await writePauses()
                await writeJobFailures()
            }
        }
        // What the last chunks decided before the shutdown reached this service.
        await writePauses()
        await writeJobFailures()
    }

    private func writePauses() async {
        for (target, reason) in appHealth.drainPauses() {
            let app = target.appID
            if target.webPushOnly {
                logger.error("pausing the app's Web Push after push services refused its VAPID token", metadata: [
                    "app": "\(app)", "reason": "\(reason)",
                ])
            } else {
                logger.error("pausing app after repeated configuration errors", metadata: ["app": "\(app)", "reason": "\(reason)"])
            }
            do {
                if target.webPushOnly {
                    _ = try await store.pauseWebPush(app, reason: reason)
                } else {
                    _ = try await store.pauseApp(app, reason: reason)
                }
            } catch {
                logger.warning("could not write the pause yet; retrying", metadata: ["app": "\(app)"])
                appHealth.retryPause(target, reason: reason)
            }
        }
    }

    private func writeJobFailures() async {
        for (job, reason) in verdicts.failuresToWrite() {
            do {
                try await store.failJob(job, reason: reason)
                verdicts.written(job)
                logger.error("job failed: APNs refuses its requests for every token", metadata: ["job": "\(job)", "reason": "\(reason)"])
            } catch {
                logger.warning("could not record the job's failure yet; retrying", metadata: ["job": "\(job)"])
            }
        }
    }
}
