import Foundation
import Testing

@Suite("pgpush demo", .timeLimit(.minutes(4)))
struct DemoTests {
    @Test("a 3,000-device demo on a throwaway cluster: live devices delivered, dead and malformed ones failed and pruned, nothing duplicated, cluster removed")
    func demoEndToEnd() async throws {
        let run = try await CLIProcess.run(
            ["demo", "--devices", "3000", "--workers", "2", "--json", "--timeout", "120"], timeout: .seconds(200))
        #expect(run.status == 0, "\(run)")
        let summary = try #require(try run.json() as? [String: Any], "\(run)")

        // 2 % dead and 0.5 % malformed of 3,000.
        let (live, dead, bad): (Int64, Int64, Int64) = (2925, 60, 15)
        let devices = try #require(summary["devices"] as? [String: Any])
        #expect(jsonInt(devices["total"]) == 3000)
        #expect(jsonInt(devices["dead"]) == dead)
        #expect(jsonInt(devices["bad"]) == bad)

        let job = try #require(summary["job"] as? [String: Any])
        #expect(job["state"] as? String == "done")
        #expect(jsonInt(job["total"]) == 3000)
        #expect(jsonInt(job["delivered"]) == live)
        #expect(jsonInt(job["failed"]) == dead + bad)
        // The pruner deletes 410 Unregistered devices (registered before APNs' timestamp) and, since the
        // wrong-environment valve did not trip, BadDeviceToken devices as well.
        #expect(jsonInt(job["pruned"]) == dead + bad)
        #expect(jsonInt(job["pending"]) == 0)

        let outcomes = try #require(summary["delivery_stats"] as? [[String: Any]])
        func count(status: Int64, reason: String?) -> Int64? {
            outcomes.first { jsonInt($0["status"]) == status && ($0["reason"] as? String) == reason }.flatMap { jsonInt($0["count"]) }
        }
        #expect(count(status: 200, reason: nil) == live)
        #expect(count(status: 410, reason: "Unregistered") == dead)
        #expect(count(status: 400, reason: "BadDeviceToken") == bad)

        let simulator = try #require(summary["simulator"] as? [String: Any])
        #expect(jsonInt(simulator["accepted"]) == live)
        #expect(jsonInt(simulator["duplicates"]) == 0)

        let workers = try #require(summary["workers"] as? [[String: Any]])
        #expect(workers.count == 2)
        #expect(workers.allSatisfy { jsonInt($0["exit_status"]) == 0 })
        #expect(workers.compactMap { jsonInt($0["tokens_sent"]) }.reduce(0, +) == 3000)

        let cluster = try #require(summary["cluster_directory"] as? String)
        #expect(!FileManager.default.fileExists(atPath: cluster), "cluster directory \(cluster) left behind")
        #expect(!runningProcessMentions(cluster), "a process still runs from \(cluster)")
    }
}

/// An integer JSON value.
func jsonInt(_ value: Any?) -> Int64? {
    (value as? NSNumber)?.int64Value
}

/// Whether any process's command line contains `text` (a leftover postmaster of a removed cluster).
func runningProcessMentions(_ text: String) -> Bool {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    for pid in entries where Int32(pid) != nil {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { continue }
        let commandLine = String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
        if commandLine.contains(text) { return true }
    }
    return false
}
