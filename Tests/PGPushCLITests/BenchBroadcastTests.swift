import Foundation
import Testing

@Suite("pgpush bench broadcast", .timeLimit(.minutes(4)), .database)
struct BenchBroadcastTests {
    @Test("a 5,000-device broadcast with two workers: throughput, latency percentiles, every token accepted once")
    func benchBroadcast() async throws {
        let run = try await CLIProcess.run(
            ["bench", "broadcast", "--devices", "5000", "--workers", "2", "--json", "--latency-samples", "5",
             "--timeout", "150"],
            timeout: .seconds(200))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(report["job_state"] as? String == "done")
        #expect(jsonInt(report["tokens"]) == 5000)
        #expect(jsonInt(report["delivered"]) == 5000)
        let rate = try #require((report["tokens_per_second"] as? NSNumber)?.doubleValue)
        #expect(rate > 0)
        #expect(jsonInt(report["latency_samples"]) == 5)
        let p50 = try #require((report["enqueue_to_first_send_p50_ms"] as? NSNumber)?.doubleValue)
        let p99 = try #require((report["enqueue_to_first_send_p99_ms"] as? NSNumber)?.doubleValue)
        #expect(p50 >= 0 && p50 <= p99)
        #expect(jsonInt(report["simulator_accepted"]) == 5000)
        #expect(jsonInt(report["simulator_duplicates"]) == 0)
        #expect((jsonInt(report["worker_peak_rss_kb"]) ?? 0) > 0)
        #expect((jsonInt(report["statements"]) ?? 0) > 0)
        let workers = try #require(report["worker_reports"] as? [[String: Any]])
        #expect(workers.count == 2)
        #expect(workers.compactMap { jsonInt($0["tokens_sent"]) }.reduce(0, +) == 5000)
    }

    @Test("an external simulator needs a key it trusts: usage error, nothing started")
    func externalSimulatorNeedsKey() async throws {
        let run = try await CLIProcess.run(
            ["bench", "broadcast", "--simulator-endpoint", "https://127.0.0.1:1", "--simulator-ca", "/nonexistent"])
        #expect(run.status == 64, "\(run)")
        #expect(run.stderr.contains("--key-file"))
    }
}
