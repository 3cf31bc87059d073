import Foundation
import Logging
import PGPushStore
import ServiceLifecycle

/// Writes the decisions the chunks reach about whole apps and jobs: pauses after repeated configuration
/// errors (``AppHealth``) and job failures after job-level errors (``JobVerdicts``). A write that fails while
/// the database is down is kept and tried again when next woken (every turn of the claim service).
struct VerdictWriter: Service {
    let worker: Worker

    func run() async {
        await cancelWhenGracefulShutdown {
            for await _ in worker.verdictWake.signals {
                await writePauses()
                await writeJobFailures()
            }
        }
        // What the last chunks decided before the shutdown reached this service.
        await writePauses()
        await writeJobFailures()
    }

    private func writePauses() async {
        for (target, reason) in worker.appHealth.drainPauses() {
            let app = target.appID
            if target.webPushOnly {
                worker.logger.error("pausing the app's Web Push after push services refused its VAPID token", metadata: [
                    "app": "\(app)", "reason": "\(reason)",
                ])
            } else {
                worker.logger.error("pausing app after repeated configuration errors", metadata: ["app": "\(app)", "reason": "\(reason)"])
            }
            do {
                if target.webPushOnly {
                    _ = try await worker.store.pauseWebPush(app, reason: reason)
                } else {
                    _ = try await worker.store.pauseApp(app, reason: reason)
                }
            } catch {
                worker.logger.warning("could not write the pause yet; retrying", metadata: ["app": "\(app)"])
                worker.appHealth.retryPause(target, reason: reason)
            }
        }
    }

    private func writeJobFailures() async {
        for (job, reason) in worker.verdicts.failuresToWrite() {
            do {
                try await worker.store.failJob(job, reason: reason)
                worker.verdicts.written(job)
                worker.logger.error("job failed: APNs refuses its requests for every token", metadata: ["job": "\(job)", "reason": "\(reason)"])
            } catch {
                worker.logger.warning("could not record the job's failure yet; retrying", metadata: ["job": "\(job)"])
            }
        }
    }
}
