import Foundation
import PGPushCLISupport

/// What `pgpush bench broadcast --rounds N` (and `--alternate-apns`) measured: every run, and the medians of the
/// web runs and of the APNs-only ones, with the per-round ratio of web messages/s to APNs tokens/s.
struct BenchBroadcastSeries: Sendable {
    var runs: [BenchBroadcastReport]

    /// Runs with web subscriptions, and runs without (APNs, or whatever the audience was).
    var webRuns: [BenchBroadcastReport] { runs.filter { $0.webShare > 0 } }
    var otherRuns: [BenchBroadcastReport] { runs.filter { $0.webShare == 0 } }

    /// Web messages/s over APNs tokens/s, round by round (a web run and the APNs run after it).
    var ratios: [Double] {
        var ratios: [Double] = []
        var pending: Double?
        for run in runs {
            if run.webShare > 0 {
                pending = run.webMessagesPerSecond
            } else if let web = pending, let apns = run.tokensPerSecond, apns > 0 {
                ratios.append(web / apns)
                pending = nil
            }
        }
        return ratios
    }

    static func median(_ values: [Double]) -> Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    var medianWebMessagesPerSecond: Double? { Self.median(webRuns.compactMap(\.webMessagesPerSecond)) }
    var medianCPUPerWebMessage: Double? { Self.median(webRuns.compactMap(\.cpuMicrosecondsPerWebMessage)) }
    var medianTokensPerSecond: Double? { Self.median(otherRuns.compactMap(\.tokensPerSecond)) }
    var medianCPUPerToken: Double? { Self.median(otherRuns.compactMap(\.cpuMicrosecondsPerToken)) }
    var medianRatio: Double? { Self.median(ratios) }

    var json: [String: Any] {
        [
            "runs": runs.map(\.json),
            "web_runs": webRuns.count, "other_runs": otherRuns.count,
            "median_web_messages_per_second": jsonValue(medianWebMessagesPerSecond),
            "median_worker_cpu_us_per_web_message": jsonValue(medianCPUPerWebMessage),
            "median_tokens_per_second_without_web": jsonValue(medianTokensPerSecond),
            "median_worker_cpu_us_per_token_without_web": jsonValue(medianCPUPerToken),
            "web_to_apns_ratios": ratios,
            "median_web_to_apns_ratio": jsonValue(medianRatio),
        ]
    }

    var text: String {
        func number(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "-" }
        var table = Table(["run", "audience", "tokens", "tokens/s", "web msgs/s", "CPU µs/token", "CPU µs/web msg", "peak RSS MB", "duplicates"])
        for (index, run) in runs.enumerated() {
            table.append([
                String(index + 1), run.audienceLabel, String(run.tokens), number(run.tokensPerSecond, "%.0f"),
                number(run.webMessagesPerSecond, "%.0f"), number(run.cpuMicrosecondsPerToken, "%.1f"),
                number(run.cpuMicrosecondsPerWebMessage, "%.1f"),
                number(run.peakRSSKilobytes.map { Double($0) / 1024 }, "%.1f"), run.duplicates.map { String($0) },
            ])
        }
        var medians = Table(["median", "value"])
        if !webRuns.isEmpty {
            medians.append(["web messages/s (of \(webRuns.count))", number(medianWebMessagesPerSecond, "%.0f")])
            medians.append(["worker CPU per web message (µs)", number(medianCPUPerWebMessage, "%.1f")])
        }
        if !otherRuns.isEmpty {
            medians.append(["tokens/s without web (of \(otherRuns.count))", number(medianTokensPerSecond, "%.0f")])
            medians.append(["worker CPU per token without web (µs)", number(medianCPUPerToken, "%.1f")])
        }
        if !ratios.isEmpty {
            medians.append([
                "web messages/s ÷ APNs tokens/s",
                number(medianRatio, "%.2f") + " (rounds " + ratios.map { String(format: "%.2f", $0) }.joined(separator: " / ") + ")",
            ])
        }
        return table.render() + "\n\n" + medians.render()
    }
}

extension BenchBroadcastSeries: BenchReport {}
