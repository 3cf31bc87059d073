import Foundation
import PGPushCLISupport
import PGPushSimulator

/// What `pgpush bench mixed` measured.
struct BenchMixedReport: Sendable {
    /// One run of the broadcast.
    struct Broadcast: Sendable {
        var state: String
        /// Final outcomes (delivered + failed).
        var tokens: Int64
        /// `push.jobs.finished_at − started_at`.
        var seconds: Double?

        var tokensPerSecond: Double? {
            guard let seconds, seconds > 0 else { return nil }
            return Double(tokens) / seconds
        }

        var json: [String: Any] {
            ["state": state, "tokens": tokens, "seconds": jsonValue(seconds), "tokens_per_second": jsonValue(tokensPerSecond)]
        }
    }

    var devices: Int
    var rate: Int
    var duration: Double
    var priority: Int
    var broadcastPriority: Int
    var workers: Int
    /// The in-process simulator's answer delay; `nil` with an external simulator.
    var simulatorLatency: SimulatorLatency?
    var smallJobsScheduled: Int
    var smallJobsEnqueued: Int
    /// How long the paced producer ran.
    var enqueueSeconds: Double
    /// The longest a small job was enqueued after its due time.
    var maximumEnqueueLagSeconds: Double
    var smallJobStates: [String: Int]
    /// Enqueue→first send of each small job that sent, in seconds.
    var latencySeconds: [Double]
    /// Small jobs created, and small jobs first sent, before the mixed broadcast's finished_at.
    var enqueuedDuringBroadcast: Int
    var sentDuringBroadcast: Int
    /// The broadcast alone (`nil` with --skip-solo) and alongside the small jobs.
    var solo: Broadcast?
    var mixed: Broadcast
    /// The workers of both phases, as they reported when stopped.
    var workerReports: [WorkerProcess.Report]

    /// Mixed tokens/s ÷ solo tokens/s: what the small jobs cost the broadcast.
    var throughputRatio: Double? {
        guard let mixedRate = mixed.tokensPerSecond, let soloRate = solo?.tokensPerSecond, soloRate > 0 else { return nil }
        return mixedRate / soloRate
    }

    var allDone: Bool {
        smallJobStates["done", default: 0] == smallJobsEnqueued && smallJobStates.count == 1
            && mixed.state == "done" && (solo?.state ?? "done") == "done"
    }

    var peakRSSKilobytes: Int? { workerReports.compactMap(\.peakRSSKilobytes).max() }

    func latencyMilliseconds(_ fraction: Double) -> Double? {
        BenchBroadcastReport.percentile(latencySeconds, fraction).map { $0 * 1000 }
    }

    var latencyMaxMilliseconds: Double? { latencySeconds.max().map { $0 * 1000 } }

    var json: [String: Any] {
        [
            "devices": devices, "rate": rate, "duration_seconds": duration, "priority": priority,
            "broadcast_priority": broadcastPriority, "workers": workers,
            "simulator_latency_ms": jsonValue(simulatorLatency?.json),
            "small_jobs_scheduled": smallJobsScheduled,
            "small_jobs_enqueued": smallJobsEnqueued,
            "enqueue_seconds": enqueueSeconds,
            "enqueue_max_lag_ms": maximumEnqueueLagSeconds * 1000,
            "small_job_states": smallJobStates,
            "small_enqueue_to_first_send_p50_ms": jsonValue(latencyMilliseconds(0.50)),
            "small_enqueue_to_first_send_p90_ms": jsonValue(latencyMilliseconds(0.90)),
            "small_enqueue_to_first_send_p99_ms": jsonValue(latencyMilliseconds(0.99)),
            "small_enqueue_to_first_send_max_ms": jsonValue(latencyMaxMilliseconds),
            "small_jobs_enqueued_during_broadcast": enqueuedDuringBroadcast,
            "small_jobs_sent_during_broadcast": sentDuringBroadcast,
            "solo_broadcast": jsonValue(solo?.json),
            "mixed_broadcast": mixed.json,
            "solo_tokens_per_second": jsonValue(solo?.tokensPerSecond),
            "mixed_tokens_per_second": jsonValue(mixed.tokensPerSecond),
            "mixed_to_solo_ratio": jsonValue(throughputRatio),
            "all_done": allDone,
            "worker_peak_rss_kb": jsonValue(peakRSSKilobytes),
            "worker_reports": workerReports.map(\.json),
        ]
    }

    var text: String {
        func number(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "-" }
        var table = Table(["figure", "value"])
        table.append(["broadcast devices", String(devices)])
        table.append(["workers", String(workers)])
        table.append(["simulator latency", simulatorLatency?.label ?? "external simulator"])
        table.append(["priorities (small / broadcast)", "\(priority) / \(broadcastPriority)"])
        table.append(["small jobs enqueued / scheduled", "\(smallJobsEnqueued) / \(smallJobsScheduled)"])
        table.append(["small-job rate (scheduled, /s)", String(rate)])
        table.append(["producer ran (s)", String(format: "%.1f", enqueueSeconds)])
        table.append(["producer max lag (ms)", String(format: "%.1f", maximumEnqueueLagSeconds * 1000)])
        table.append(["small enqueue→first send p50 (ms)", number(latencyMilliseconds(0.50), "%.1f")])
        table.append(["small enqueue→first send p90 (ms)", number(latencyMilliseconds(0.90), "%.1f")])
        table.append(["small enqueue→first send p99 (ms)", number(latencyMilliseconds(0.99), "%.1f")])
        table.append(["small enqueue→first send max (ms)", number(latencyMaxMilliseconds, "%.1f")])
        table.append(["small jobs enqueued during the broadcast", String(enqueuedDuringBroadcast)])
        table.append(["small jobs sent during the broadcast", String(sentDuringBroadcast)])
        table.append(["small job states", BroadcastRig.describe(smallJobStates)])
        table.append(["broadcast alone: tokens/s", solo.map { number($0.tokensPerSecond, "%.0f") } ?? "skipped"])
        table.append(["broadcast mixed: tokens/s", number(mixed.tokensPerSecond, "%.0f")])
        table.append(["mixed ÷ alone", number(throughputRatio, "%.2f")])
        table.append(["broadcast states (alone / mixed)", "\(solo?.state ?? "-") / \(mixed.state)"])
        table.append(["worker peak RSS (MB)", number(peakRSSKilobytes.map { Double($0) / 1024 }, "%.1f")])
        return table.render()
    }
}
