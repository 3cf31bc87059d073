import Foundation
import Testing

@Suite("pgpush bench soak", .timeLimit(.minutes(3)), .database)
struct BenchSoakTests {
    /// A short soak with every fault on: 5xx answers, GOAWAYs, a PostgreSQL restart at 40 % and a worker
    /// restart at 60 % of 12 s, one sample every 2 s.
    @Test("a short soak with faults: samples with RSS, descriptors and table sizes, both restarts, exactly one outcome per token")
    func shortSoakWithFaults() async throws {
        let run = try await CLIProcess.run(
            ["bench", "soak", "--duration", "12", "--devices", "2000", "--broadcast-every", "4", "--rate", "20",
             "--users", "200", "--report-every", "2", "--latency-ms", "5", "--goaway-every", "500",
             "--postgres-downtime", "1", "--drain-timeout", "60", "--json"],
            timeout: .seconds(150))
        // Exit 1 is a failed check; a short run may fail the RSS or p99 comparison, never the audit.
        #expect(run.status == 0 || run.status == 1, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(run.status == ((report["passed"] as? Bool) == true ? 0 : 1), "\(run)")

        let samples = try #require(report["samples"] as? [[String: Any]], "\(run)")
        #expect(samples.count >= 6, "\(samples.count) samples")
        for sample in samples {
            #expect(jsonDouble(sample["at_seconds"]) != nil)
            #expect(sample["events"] is [Any])
        }
        // While PostgreSQL is down a sample has no database part; the others have every figure.
        let withDatabase = samples.filter { $0["tables"] is [String: Any] }
        #expect(withDatabase.count >= samples.count - 2, "\(samples)")
        for sample in withDatabase {
            let tables = try #require(sample["tables"] as? [String: [String: Any]])
            #expect(Set(tables.keys) == ["jobs", "chunks", "deliveries", "devices"])
            #expect((jsonInt(tables["devices"]?["table_bytes"]) ?? 0) > 0)
            #expect((jsonInt(tables["jobs"]?["index_bytes"]) ?? 0) > 0)
            #expect(jsonInt(tables["chunks"]?["dead_tuples"]) != nil)
        }
        #expect(withDatabase.contains { (jsonInt(($0["tables"] as? [String: [String: Any]])?["deliveries"]?["table_bytes"]) ?? 0) > 0 })
        #expect(withDatabase.contains { (jsonDouble($0["one_token_jobs_per_second"]) ?? 0) > 0 })
        #expect(withDatabase.contains { (jsonDouble($0["broadcast_tokens_per_second"]) ?? 0) > 0 })
        #expect(withDatabase.contains { jsonDouble($0["enqueue_to_first_send_p99_ms"]) != nil })
        // A worker runs at every sample but the one taken while it is being replaced.
        let withWorker = samples.filter { (jsonInt($0["worker_rss_kb"]) ?? 0) > 0 && (jsonInt($0["worker_open_fds"]) ?? 0) > 0 }
        #expect(withWorker.count >= samples.count - 1, "\(samples)")

        // Both restarts happened, each once, in order, and the stopped worker drained and exited 0.
        #expect(jsonInt(report["postgres_restarts"]) == 1, "\(run)")
        #expect(jsonInt(report["worker_restarts"]) == 1, "\(run)")
        let events = try #require(report["events"] as? [[String: Any]])
        #expect(events.map { $0["kind"] as? String } == ["postgres_restart", "worker_restart"], "\(events)")
        let workerRestart = try #require(events.first { $0["kind"] as? String == "worker_restart" })
        #expect((workerRestart["detail"] as? [String: String])?["exit_status"] == "0", "\(workerRestart)")
        #expect(samples.contains { ($0["events"] as? [String])?.isEmpty == false })

        // The faults reached the simulator.
        let simulator = try #require(report["simulator"] as? [String: Any])
        #expect((jsonInt(simulator["server_errors"]) ?? 0) > 0, "\(simulator)")
        #expect((jsonInt(simulator["goaways_sent"]) ?? 0) > 0, "\(simulator)")

        // Every job has exactly one outcome per token.
        #expect(report["drained"] as? Bool == true, "\(run)")
        let audit = try #require(report["audit"] as? [String: Any], "\(run)")
        #expect(audit["exactly_once"] as? Bool == true, "\(audit)")
        #expect((jsonInt(audit["one_token_jobs"]) ?? 0) > 100, "\(audit)")
        #expect((jsonInt(audit["broadcasts"]) ?? 0) >= 3, "\(audit)")
        #expect(jsonInt(audit["duplicate_outcomes"]) == 0 && jsonInt(audit["missing_outcomes"]) == 0, "\(audit)")
        let checks = try #require(report["checks"] as? [String: [String: Any]])
        #expect(Set(checks.keys) == ["rss", "p99", "fds", "tables", "exactly_once"])
        #expect(checks["exactly_once"]?["passed"] as? Bool == true)
        for (name, check) in checks {
            #expect(check["passed"] is Bool && check["summary"] is String, "\(name): \(check)")
        }
    }
}
