import Foundation
import Testing

@Suite("pgpush bench small-jobs and mixed", .timeLimit(.minutes(6)), .database)
struct BenchSmallJobsTests {
    @Test("200 one-device jobs from 4 producers: every figure reported, every job done with one outcome")
    func smallJobs() async throws {
        let run = try await CLIProcess.run(
            ["bench", "small-jobs", "--jobs", "200", "--producers", "4", "--latency-ms", "5", "--json", "--timeout", "200"],
            timeout: .seconds(260))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(jsonInt(report["jobs"]) == 200)
        #expect(jsonInt(report["producers"]) == 4)
        #expect(jsonCounts(report["job_states"]) == ["done": 200])
        #expect(report["all_done"] as? Bool == true)
        #expect(jsonInt(report["outcome_rows"]) == 200)
        #expect(jsonInt(report["outcome_jobs"]) == 200)
        #expect(report["one_outcome_per_job"] as? Bool == true)
        let rate = try #require(jsonDouble(report["jobs_per_second"]), "\(run)")
        #expect(rate > 0)
        // The drain: jobs left when the last producer committed, and their rate from then to the last finish.
        let drained = try #require(jsonInt(report["drained_jobs"]), "\(run)")
        #expect(drained > 0 && drained <= 200, "\(run)")
        let drainSeconds = try #require(jsonDouble(report["drain_seconds"]), "\(run)")
        let drainRate = try #require(jsonDouble(report["drained_jobs_per_second"]), "\(run)")
        #expect(drainSeconds > 0 && abs(drainRate - Double(drained) / drainSeconds) < 0.01, "\(run)")
        let quickest = try #require(jsonDouble(report["enqueue_to_first_send_min_ms"]))
        let p50 = try #require(jsonDouble(report["enqueue_to_first_send_p50_ms"]))
        let p99 = try #require(jsonDouble(report["enqueue_to_first_send_p99_ms"]))
        let max = try #require(jsonDouble(report["enqueue_to_first_send_max_ms"]))
        #expect(quickest >= 5 && quickest <= p50 && p50 <= p99 && p99 <= max)
        #expect((jsonDouble(report["statements_per_job"]) ?? 0) > 0)
        #expect((jsonDouble(report["worker_cpu_us_per_job"]) ?? 0) > 0)
        #expect((jsonInt(report["worker_peak_rss_kb"]) ?? 0) > 0)
        #expect(jsonInt(report["simulator_accepted"]) == 200)
        let latency = try #require(report["simulator_latency_ms"] as? [String: Any])
        #expect(jsonDouble(latency["min"]) == 5 && jsonDouble(latency["max"]) == 5)
    }

    @Test("a 40 ms simulator latency shows in enqueue→first send")
    func latencyIsApplied() async throws {
        let run = try await CLIProcess.run(
            ["bench", "small-jobs", "--jobs", "20", "--producers", "2", "--latency-ms", "40", "--json", "--timeout", "120"],
            timeout: .seconds(180))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        let p50 = try #require(jsonDouble(report["enqueue_to_first_send_p50_ms"]), "\(run)")
        #expect(p50 >= 40)
        // Queueing behind other jobs alone could push the median past 40 ms; the quickest job cannot.
        let quickest = try #require(jsonDouble(report["enqueue_to_first_send_min_ms"]), "\(run)")
        #expect(quickest >= 40)
        let latency = try #require(report["simulator_latency_ms"] as? [String: Any])
        #expect(jsonDouble(latency["min"]) == 40 && jsonDouble(latency["max"]) == 40)
    }

    @Test("a 3,000-device broadcast with 50 small jobs/s for 2 s: latency figures, throughput, all done")
    func mixed() async throws {
        let run = try await CLIProcess.run(
            ["bench", "mixed", "--devices", "3000", "--rate", "50", "--duration", "2", "--latency-ms", "5", "--json",
             "--timeout", "200"],
            timeout: .seconds(260))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(report["all_done"] as? Bool == true)
        #expect(jsonInt(report["small_jobs_scheduled"]) == 100)
        let enqueued = try #require(jsonInt(report["small_jobs_enqueued"]))
        #expect(enqueued > 0 && enqueued <= 100)
        #expect(jsonCounts(report["small_job_states"]) == ["done": enqueued])
        for key in ["small_enqueue_to_first_send_p50_ms", "small_enqueue_to_first_send_p90_ms",
                    "small_enqueue_to_first_send_p99_ms", "small_enqueue_to_first_send_max_ms",
                    "solo_tokens_per_second", "mixed_tokens_per_second", "mixed_to_solo_ratio"] {
            #expect((jsonDouble(report[key]) ?? 0) > 0, "\(key): \(run)")
        }
        #expect(jsonInt(report["small_jobs_enqueued_during_broadcast"]) != nil)
        #expect(jsonInt(report["small_jobs_sent_during_broadcast"]) != nil)
        let mixed = try #require(report["mixed_broadcast"] as? [String: Any])
        #expect(mixed["state"] as? String == "done")
        #expect(jsonInt(mixed["tokens"]) == 3000)
        let solo = try #require(report["solo_broadcast"] as? [String: Any])
        #expect(jsonInt(solo["tokens"]) == 3000)
        #expect((jsonInt(report["worker_peak_rss_kb"]) ?? 0) > 0)
        #expect(report["simulator_latency_ms"] is [String: Any])
    }

    @Test("an unparsable --latency-ms is a usage error that names the flag", arguments: ["small-jobs", "mixed", "broadcast"])
    func invalidLatency(mode: String) async throws {
        let run = try await CLIProcess.run(["bench", mode, "--latency-ms", "abc"])
        #expect(run.status == 64, "\(run)")
        #expect(run.stderr.contains("--latency-ms"), "\(run)")
    }
}

/// A floating-point JSON value.
func jsonDouble(_ value: Any?) -> Double? {
    (value as? NSNumber)?.doubleValue
}

/// A JSON object of integers, such as job counts by state.
func jsonCounts(_ value: Any?) -> [String: Int64]? {
    (value as? [String: Any])?.compactMapValues(jsonInt)
}
