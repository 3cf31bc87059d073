import Foundation
import PGPushCLISupport
import PGPushDevelopment

/// What `pgpush demo` prints at the end, as aligned tables or JSON.
struct DemoSummary: Sendable {
    var job: JobSnapshot
    /// Seconds from the first claim to the last write.
    var jobSeconds: Double?
    var outcomes: [DeliveryOutcome]
    var devices: BroadcastRig.Devices
    /// Accepted notifications and duplicated tokens according to the simulators' ledgers (APNs, FCM and Web
    /// Push).
    var ledger: (accepted: Int, duplicates: Int)?
    /// The FCM simulator's part of the ledger, when the audience has Android devices.
    var fcmLedger: (accepted: Int, duplicates: Int)? = nil
    /// The Web Push simulator's part, when the audience has web subscriptions.
    var webLedger: WebLedger? = nil
    /// The job's audience and outcomes per platform (`push.job_progress`).
    var platforms: [PlatformProgress] = []
    var workers: [WorkerProcess.Report]
    /// The throwaway cluster's directory (removed by the time the summary is printed).
    var clusterDirectory: String?
    /// The Live Activity update and the channel broadcast, when they ran.
    var liveActivities: DemoLiveActivities.Result? = nil
    var elapsedSeconds: Double

    var tokensPerSecond: Double? {
        guard let jobSeconds, jobSeconds > 0 else { return nil }
        return Double(job.processed) / jobSeconds
    }

    var text: String {
        var jobTable = Table(["job", "state", "total", "delivered", "failed", "pruned", "pending", "seconds", "tokens/s"])
        jobTable.append([
            String(job.jobID), job.state, job.total.map { String($0) }, String(job.delivered), String(job.failed),
            String(job.pruned), String(job.pending), jobSeconds.map { String(format: "%.2f", $0) },
            tokensPerSecond.map { String(format: "%.0f", $0) },
        ])
        var platformTable = Table(["platform", "total", "delivered", "failed"])
        for platform in platforms where platform.total > 0 || platform.delivered + platform.failed > 0 {
            platformTable.append([
                Self.platformNames[platform.platform] ?? platform.platform, String(platform.total), String(platform.delivered),
                String(platform.failed),
            ])
        }
        var outcomeTable = Table(["platform", "status", "reason", "count"])
        for outcome in outcomes {
            outcomeTable.append([outcome.platform, String(outcome.status), outcome.reason, String(outcome.count)])
        }
        var workerTable = Table(["worker", "exit", "tokens sent", "statements", "peak RSS MB"])
        for worker in workers {
            workerTable.append([
                worker.id, String(worker.exitStatus), worker.tokensSent.map { String($0) },
                worker.statements.map { String($0) },
                worker.peakRSSKilobytes.map { String(format: "%.1f", Double($0) / 1024) },
            ])
        }
        var simulator = Table(["simulator", "count"])
        if let ledger {
            let fcm = fcmLedger ?? (0, 0)
            let webAccepted = webLedger?.accepted ?? 0
            simulator.append(["APNs accepted", String(ledger.accepted - fcm.accepted - webAccepted)])
            if fcmLedger != nil { simulator.append(["FCM accepted", String(fcm.accepted)]) }
            if let webLedger {
                simulator.append(["Web Push accepted", String(webLedger.accepted)])
                simulator.append(["Web Push duplicates", String(webLedger.duplicates)])
                simulator.append(["Web Push over", webLedger.httpVersions])
            }
            simulator.append(["duplicates", String(ledger.duplicates)])
        }
        let lines: [String] = [
            "",
            "Devices: \(devices.total) registered (\(devices.live) live, \(devices.dead) dead, \(devices.bad) malformed; "
                + "\(devices.total - devices.android - devices.web - devices.webDead) iOS, \(devices.android) Android"
                + (devices.web + devices.webDead > 0 ? ", \(devices.web + devices.webDead) web (\(devices.webDead) dead)" : "") + ")",
            "", jobTable.render(), "", platformTable.render(), "", outcomeTable.render(), "", simulator.render(), "",
        ] + (liveActivities.map { $0.lines + [""] } ?? []) + [
            workerTable.render(), "",
            "Finished in \(String(format: "%.1f", elapsedSeconds)) s; "
                + (clusterDirectory.map { "throwaway cluster \($0) removed." } ?? "database left in place."),
        ]
        return lines.joined(separator: "\n")
    }

    /// How the summary names a platform.
    static let platformNames = ["ios": "iOS", "android": "Android", "web": "Web"]

    var json: [String: Any] {
        var object: [String: Any] = [
            "job": job.json.merging(
                ["seconds": jsonValue(jobSeconds), "tokens_per_second": jsonValue(tokensPerSecond)]) { $1 },
            "delivery_stats": outcomes.map(\.json),
            "devices": devices.json,
            "workers": workers.map(\.json),
            "cluster_directory": jsonValue(clusterDirectory),
            "elapsed_seconds": elapsedSeconds,
            "live_activities": liveActivities.map { $0.json } ?? NSNull(),
        ]
        object["platforms"] = platforms.map { ["platform": $0.platform, "total": $0.total, "delivered": $0.delivered, "failed": $0.failed] }
        object["simulator"] = ledger.map { ledger -> [String: Any] in
            let fcm = fcmLedger ?? (0, 0)
            let web = webLedger?.accepted ?? 0
            return ["accepted": ledger.accepted, "duplicates": ledger.duplicates,
                    "apns_accepted": ledger.accepted - fcm.accepted - web, "fcm_accepted": fcm.accepted,
                    "web_push": webLedger.map { $0.json } ?? NSNull()]
        } ?? NSNull()
        return object
    }
}
