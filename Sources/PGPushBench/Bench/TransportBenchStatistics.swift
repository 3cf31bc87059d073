import Foundation

/// Latencies in a log-scale histogram (2 % wide buckets): constant memory however many requests are measured.
struct TransportLatencyHistogram: Sendable {
    private static let growth = 1.02
    private static let bucketCount = 1200  // 1.02^1200 µs is far beyond any request timeout
    private var buckets = [Int](repeating: 0, count: bucketCount)
    private(set) var count = 0
    private(set) var maximumMicroseconds: Double = 0

    mutating func record(_ duration: Duration) {
        let micros = max(1, duration.microseconds)
        let index = min(Self.bucketCount - 1, Int(log(micros) / log(Self.growth)))
        buckets[index] += 1
        count += 1
        maximumMicroseconds = max(maximumMicroseconds, micros)
    }

    mutating func merge(_ other: TransportLatencyHistogram) {
        for index in buckets.indices { buckets[index] += other.buckets[index] }
        count += other.count
        maximumMicroseconds = max(maximumMicroseconds, other.maximumMicroseconds)
    }

    /// The upper bound of the bucket holding the `quantile` (0…1) value, in milliseconds.
    func percentileMilliseconds(_ quantile: Double) -> Double {
        guard count > 0 else { return 0 }
        let rank = Int((quantile * Double(count)).rounded(.up))
        var seen = 0
        for (index, bucketCount) in buckets.enumerated() where bucketCount > 0 {
            seen += bucketCount
            if seen >= rank {
                return min(pow(Self.growth, Double(index + 1)), maximumMicroseconds) / 1000
            }
        }
        return maximumMicroseconds / 1000
    }
}

extension Duration {
    var microseconds: Double {
        let parts = components
        return Double(parts.seconds) * 1e6 + Double(parts.attoseconds) / 1e12
    }
}

/// Peak resident set size of this process (`VmHWM` in /proc/self/status), in kilobytes; `nil` off Linux.
func peakResidentKilobytes() -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "")
    }
    return nil
}

/// What the workers measured.
struct TransportBenchTally: Sendable {
    var latency = TransportLatencyHistogram()
    var outcomes: [String: Int] = [:]
    var completed = 0

    mutating func record(_ duration: Duration, outcome: String) {
        latency.record(duration)
        outcomes[outcome, default: 0] += 1
        completed += 1
    }
}

/// The result printed by `pgpush bench transport`.
struct TransportBenchReport: Codable {
    var endpoint: String
    /// The transport's HTTP/2 engine (``HTTP2Engine``): nio or nghttp2.
    var http2Engine: String
    var connections: Int
    var concurrency: Int
    var requested: Int
    var completed: Int
    var succeeded: Int
    var elapsedSeconds: Double
    var notificationsPerSecond: Double
    var latencyP50Milliseconds: Double
    var latencyP99Milliseconds: Double
    var latencyMaxMilliseconds: Double
    var outcomes: [String: Int]
    var peakRSSKilobytes: Int?
    var peakStreamsPerConnection: Int
    var goAwaysReceived: Int
    var reconnects: Int
    var timedOut: Bool
    /// This process's CPU time (user + system, every thread) while it sent, per notification sent: the
    /// transport's cost with no database and no scheduler.
    var cpuMicrosecondsPerNotification: Double? = nil
    /// h2load (`-c4 -m100`, the same count) against the same endpoint in the same run, when asked for.
    var h2loadRequestsPerSecond: Double? = nil
    /// This run's notifications/s as a share of h2load's requests/s.
    var shareOfH2Load: Double? = nil
    /// h2load's own CPU per request in that run.
    var h2loadCPUMicrosecondsPerRequest: Double? = nil

    var text: String {
        var lines = [
            "endpoint            \(endpoint)",
            "HTTP/2 engine       \(http2Engine)",
            "connections         \(connections)   concurrency \(concurrency)",
            "sent                \(completed) of \(requested)\(timedOut ? " (stopped by --timeout)" : "")",
            "elapsed             \(String(format: "%.3f", elapsedSeconds)) s",
            "throughput          \(String(format: "%.0f", notificationsPerSecond)) notifications/s",
            "latency             p50 \(ms(latencyP50Milliseconds))  p99 \(ms(latencyP99Milliseconds))  max \(ms(latencyMaxMilliseconds))",
            "peak streams/conn   \(peakStreamsPerConnection)   goaways \(goAwaysReceived)   reconnects \(reconnects)",
            "CPU per request     \(microseconds(cpuMicrosecondsPerNotification))\(h2loadCPUMicrosecondsPerRequest.map { "   h2load \(microseconds($0))" } ?? "")",
            "peak RSS            \(peakRSSKilobytes.map { "\($0 / 1024) MiB" } ?? "n/a")",
            "outcomes:",
        ]
        if let h2loadRequestsPerSecond, let shareOfH2Load {
            lines.insert(
                "h2load -c4 -m100    \(String(format: "%.0f", h2loadRequestsPerSecond)) requests/s   pgpush ÷ h2load \(String(format: "%.2f", shareOfH2Load))",
                at: 6)
        }
        for (key, value) in outcomes.sorted(by: { $0.value > $1.value }) {
            lines.append("  \(key.padding(toLength: 32, withPad: " ", startingAt: 0)) \(value)")
        }
        return lines.joined(separator: "\n")
    }

    private func ms(_ value: Double) -> String { String(format: "%.2f ms", value) }
    private func microseconds(_ value: Double?) -> String { value.map { String(format: "%.1f µs", $0) } ?? "n/a" }
}
