import Foundation
import PGPushCLISupport
import PGPushSimulator

/// What `pgpush bench broadcast` measured.
struct BenchBroadcastReport: Sendable {
    var devices: Int
    /// Share of the devices that were Android (sent through FCM).
    var androidShare: Double = 0
    /// Share of the devices that were web subscriptions (sent through Web Push).
    var webShare: Double = 0
    /// Whether the broadcast was a Live Activity update to update tokens.
    var liveActivity = false
    /// Whether the broadcast had per-device content: locale variants and a badge increment.
    var perDeviceContent = false
    var workers: Int
    /// The in-process simulator's answer delay; `nil` with an external simulator.
    var simulatorLatency: SimulatorLatency?
    var jobState: String
    /// Final outcomes of the broadcast (delivered + failed).
    var tokens: Int64
    var delivered: Int64
    var failed: Int64
    /// `push.jobs.finished_at − started_at` of the broadcast.
    var jobSeconds: Double?
    /// Enqueue→first-send of each one-token latency job, in seconds.
    var latencySeconds: [Double]
    /// The broadcast's workers, as they reported when stopped.
    var workerReports: [WorkerProcess.Report]
    /// The throwaway cluster's CPU (every PostgreSQL process) from the workers' start to their stop; `nil` with
    /// the caller's database.
    var postgresCPUSeconds: Double? = nil
    /// The simulator's accepted count right after the broadcast (before the latency jobs).
    var broadcastAccepted: Int?
    /// The broadcast's web outcomes (delivered + failed), with web subscriptions.
    var webMessages: Int64? = nil
    /// Seconds from the broadcast's first claim to its last web outcome's `sent_at`.
    var webSeconds: Double? = nil
    /// The Web Push simulator's ledger right after the broadcast.
    var webLedger: WebLedger? = nil
    /// What answered as the push service: `simulator` or `nginx`; `nil` without web subscriptions.
    var webPushAnsweredBy: String? = nil
    /// Tokens the simulator accepted more than once, over the whole run.
    var duplicates: Int?
    /// What answered as APNs: `simulator`, `nginx` or `external simulator`.
    var standIn = "simulator"
    /// h2load against the same endpoint in the same run, when asked for.
    var h2load: H2LoadBaseline.Result?
    /// Whether a process kept one core busy beside the run (`--cpu-hog`).
    var cpuHog = false

    /// The broadcast's tokens/s as a share of h2load's requests/s in the same run.
    var shareOfH2Load: Double? {
        guard let h2load, h2load.requestsPerSecond > 0, let tokensPerSecond else { return nil }
        return tokensPerSecond / h2load.requestsPerSecond
    }

    /// The broadcast workers' CPU (user + system, start-up to SIGTERM) per token, in microseconds.
    var cpuMicrosecondsPerToken: Double? {
        let seconds = workerReports.compactMap(\.cpuSeconds)
        guard seconds.count == workerReports.count, !seconds.isEmpty, tokens > 0 else { return nil }
        return seconds.reduce(0, +) * 1e6 / Double(tokens)
    }

    /// Web messages a second: web outcomes ÷ (first claim → last web outcome). With only web subscriptions this is
    /// the broadcast's rate; in a mixed audience, the web part's (which shares the worker with the rest).
    var webMessagesPerSecond: Double? {
        guard let webMessages, webMessages > 0, let webSeconds, webSeconds > 0 else { return nil }
        return Double(webMessages) / webSeconds
    }

    /// The workers' CPU per web message, encryption included, in microseconds: reported when every outcome of the
    /// broadcast was a web message (`--web-share 1`), where it is the CPU per token; in a mixed audience the
    /// platforms' shares cannot be told apart.
    var cpuMicrosecondsPerWebMessage: Double? {
        guard let webMessages, webMessages > 0, webMessages == tokens else { return nil }
        return cpuMicrosecondsPerToken
    }

    /// `web 100 %`, `APNs`, `APNs 70 %, FCM 30 %`, …: who the broadcast reached, for the rounds' table.
    var audienceLabel: String {
        let ios = max(0, 1 - androidShare - webShare)
        let parts = [("APNs", ios), ("FCM", androidShare), ("web", webShare)].filter { $0.1 > 0 }
        guard parts.count > 1 else { return parts.first?.0 ?? "-" }
        return parts.map { "\($0.0) \(Int(($0.1 * 100).rounded())) %" }.joined(separator: ", ")
    }

    var tokensPerSecond: Double? {
        guard let jobSeconds, jobSeconds > 0 else { return nil }
        return Double(tokens) / jobSeconds
    }

    /// Broadcast workers that exited on their own and were replaced (normally 0).
    var workersReplaced: Int { max(workerReports.count - workers, 0) }

    var peakRSSKilobytes: Int? { workerReports.compactMap(\.peakRSSKilobytes).max() }

    /// All broadcast workers' statements, or `nil` when one of them did not report.
    var statements: Int? {
        let counts = workerReports.compactMap(\.statements)
        return counts.count == workerReports.count && !counts.isEmpty ? counts.reduce(0, +) : nil
    }

    /// PostgreSQL's CPU per 1,000 tokens, in milliseconds: the server's share of the broadcast's cost.
    var postgresCPUMillisecondsPerThousandTokens: Double? {
        guard let postgresCPUSeconds, tokens > 0 else { return nil }
        return postgresCPUSeconds * 1e6 / Double(tokens)
    }

    var statementsPerThousandTokens: Double? {
        guard let statements, tokens > 0 else { return nil }
        return Double(statements) / (Double(tokens) / 1000)
    }

    var latencyP50Milliseconds: Double? { Self.percentile(latencySeconds, 0.50).map { $0 * 1000 } }
    var latencyP99Milliseconds: Double? { Self.percentile(latencySeconds, 0.99).map { $0 * 1000 } }

    /// What `--per-device-content` sends, for the report.
    static var perDeviceContentLabel: String {
        "\(BroadcastRig.localizedAlertCount) locale variants, badge increment"
    }

    /// Nearest-rank percentile.
    static func percentile(_ values: [Double], _ fraction: Double) -> Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }

    var json: [String: Any] {
        [
            "devices": devices, "android_share": androidShare, "web_share": webShare, "live_activity": liveActivity,
            "per_device_content": perDeviceContent, "workers": workers, "job_state": jobState, "tokens": tokens,
            "simulator_latency_ms": jsonValue(simulatorLatency?.json),
            "delivered": delivered, "failed": failed, "job_seconds": jsonValue(jobSeconds),
            "tokens_per_second": jsonValue(tokensPerSecond),
            "latency_samples": latencySeconds.count,
            "enqueue_to_first_send_p50_ms": jsonValue(latencyP50Milliseconds),
            "enqueue_to_first_send_p99_ms": jsonValue(latencyP99Milliseconds),
            "worker_peak_rss_kb": jsonValue(peakRSSKilobytes),
            "statements": jsonValue(statements),
            "statements_per_1000_tokens": jsonValue(statementsPerThousandTokens),
            "postgres_cpu_ms_per_1000_tokens": jsonValue(postgresCPUMillisecondsPerThousandTokens),
            "simulator_accepted": jsonValue(broadcastAccepted),
            "simulator_duplicates": jsonValue(duplicates),
            "worker_reports": workerReports.map(\.json),
            "workers_replaced": workersReplaced,
            "stand_in": standIn,
            "cpu_hog": cpuHog,
            "worker_cpu_us_per_token": jsonValue(cpuMicrosecondsPerToken),
            "h2load": jsonValue(h2load?.json),
            "share_of_h2load": jsonValue(shareOfH2Load),
            "web_messages": jsonValue(webMessages),
            "web_seconds": jsonValue(webSeconds),
            "web_messages_per_second": jsonValue(webMessagesPerSecond),
            "worker_cpu_us_per_web_message": jsonValue(cpuMicrosecondsPerWebMessage),
            "web_push_answered_by": jsonValue(webPushAnsweredBy),
            "web_push_simulator": jsonValue(webLedger?.json),
        ]
    }

    var text: String {
        func number(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "-" }
        var table = Table(["figure", "value"])
        table.append(["devices", String(devices)])
        table.append(["android share (FCM)", String(format: "%.2f", androidShare)])
        if webShare > 0 { table.append(["web share (Web Push)", String(format: "%.2f", webShare)]) }
        if liveActivity { table.append(["push type", "liveactivity, to update tokens"]) }
        if perDeviceContent { table.append(["per-device content", Self.perDeviceContentLabel]) }
        table.append(["workers", String(workers)])
        table.append(["APNs answered by", standIn])
        if cpuHog { table.append(["beside it", "a process keeping one core busy (--cpu-hog)"]) }
        table.append(["simulator latency", simulatorLatency?.label ?? "-"])
        if workersReplaced > 0 { table.append(["workers replaced (exited on their own)", String(workersReplaced)]) }
        table.append(["job state", jobState])
        table.append(["tokens (delivered + failed)", "\(tokens)"])
        table.append(["first claim → last write (s)", number(jobSeconds, "%.2f")])
        table.append(["tokens/s", number(tokensPerSecond, "%.0f")])
        if let webMessages {
            table.append(["Web Push answered by", webPushAnsweredBy ?? "-"])
            table.append(["web messages (delivered + failed)", String(webMessages)])
            table.append(["first claim → last web message (s)", number(webSeconds, "%.2f")])
            table.append(["web messages/s", number(webMessagesPerSecond, "%.0f")])
            table.append(["worker CPU per web message (µs, encryption included)", number(cpuMicrosecondsPerWebMessage, "%.1f")])
        }
        if let h2load {
            table.append(["h2load requests/s (\(h2load.label))", String(format: "%.0f", h2load.requestsPerSecond)])
            table.append(["tokens/s ÷ h2load requests/s", number(shareOfH2Load, "%.2f")])
        }
        table.append(["worker CPU per token (µs)", number(cpuMicrosecondsPerToken, "%.1f")])
        if let h2load { table.append(["h2load CPU per request (µs)", number(h2load.cpuMicrosecondsPerRequest, "%.1f")]) }
        table.append(["enqueue→first send p50 (ms)", number(latencyP50Milliseconds, "%.1f")])
        table.append(["enqueue→first send p99 (ms)", number(latencyP99Milliseconds, "%.1f")])
        table.append(["latency samples", String(latencySeconds.count)])
        table.append(["worker peak RSS (MB)", number(peakRSSKilobytes.map { Double($0) / 1024 }, "%.1f")])
        table.append(["PostgreSQL statements", statements.map { String($0) }])
        table.append(["statements per 1,000 tokens", number(statementsPerThousandTokens, "%.2f")])
        table.append(["PostgreSQL CPU per 1,000 tokens (ms)", number(postgresCPUMillisecondsPerThousandTokens, "%.1f")])
        table.append(["simulator accepted", broadcastAccepted.map { String($0) }])
        table.append(["simulator duplicates", duplicates.map { String($0) }])
        if let webLedger {
            table.append(["Web Push simulator accepted", String(webLedger.accepted)])
            table.append(["Web Push simulator duplicates", String(webLedger.duplicates)])
            table.append(["Web Push over", webLedger.httpVersions])
        }
        return table.render()
    }
}
