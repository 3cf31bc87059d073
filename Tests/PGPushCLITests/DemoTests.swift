import Foundation
import Testing

@Suite("pgpush demo", .timeLimit(.minutes(4)), .database)
struct DemoTests {
    @Test("a 3,000-device demo on a throwaway cluster: live devices delivered, dead and malformed ones failed and pruned, nothing duplicated, cluster removed")
    func demoEndToEnd() async throws {
        let run = try await CLIProcess.run(
            ["demo", "--devices", "3000", "--workers", "2", "--json", "--timeout", "120"], timeout: .seconds(200))
        #expect(run.status == 0, "\(run)")
        let summary = try #require(try run.json() as? [String: Any], "\(run)")

        // 2 % dead and 0.5 % malformed of 3,000; 10 % of the live and of the dead ones web subscriptions.
        let (live, dead, bad): (Int64, Int64, Int64) = (2925, 60, 15)
        let (web, webDead): (Int64, Int64) = (293, 6)
        let devices = try #require(summary["devices"] as? [String: Any])
        #expect(jsonInt(devices["total"]) == 3000)
        #expect(jsonInt(devices["dead"]) == dead)
        #expect(jsonInt(devices["bad"]) == bad)
        #expect(jsonInt(devices["web"]) == web)
        #expect(jsonInt(devices["web_dead"]) == webDead)

        let job = try #require(summary["job"] as? [String: Any])
        #expect(job["state"] as? String == "done")
        #expect(jsonInt(job["total"]) == 3000)
        #expect(jsonInt(job["delivered"]) == live)
        #expect(jsonInt(job["failed"]) == dead + bad)
        // The pruner deletes 410 Unregistered devices (registered before APNs' timestamp). The app also has
        // Android devices, and the valve's window mixes both providers, so its BadDeviceToken reports wait
        // for an operator (pgpush apps confirm-stale) instead of being pruned on the window's word.
        #expect(jsonInt(job["pruned"]) == dead)
        #expect(jsonInt(job["pending"]) == 0)

        let outcomes = try #require(summary["delivery_stats"] as? [[String: Any]])
        func count(status: Int64, reason: String?, platform: String? = nil) -> Int64? {
            let rows = outcomes.filter {
                jsonInt($0["status"]) == status && ($0["reason"] as? String) == reason
                    && (platform == nil || $0["platform"] as? String == platform)
            }
            return rows.isEmpty ? nil : rows.compactMap { jsonInt($0["count"]) }.reduce(0, +)
        }
        #expect(count(status: 200, reason: nil) == live)
        // 30 % of the live devices are Android by default, delivered through the FCM simulator.
        let android = try #require(jsonInt(devices["android"]))
        #expect(android == 878)
        #expect(count(status: 200, reason: nil, platform: "android") == android)
        #expect(count(status: 200, reason: nil, platform: "ios") == live - android - web)
        #expect(count(status: 200, reason: nil, platform: "web") == web)
        #expect(count(status: 410, reason: "Unregistered") == dead - webDead)
        #expect(count(status: 410, reason: "Gone", platform: "web") == webDead - webDead / 2)
        #expect(count(status: 404, reason: "NotFound", platform: "web") == webDead / 2)
        #expect(count(status: 400, reason: "BadDeviceToken") == bad)

        let simulator = try #require(summary["simulator"] as? [String: Any])
        #expect(jsonInt(simulator["accepted"]) == live)
        #expect(jsonInt(simulator["fcm_accepted"]) == android)
        #expect(jsonInt(simulator["apns_accepted"]) == live - android - web)
        #expect(jsonInt(simulator["duplicates"]) == 0)

        let workers = try #require(summary["workers"] as? [[String: Any]])
        #expect(workers.count == 2)
        #expect(workers.allSatisfy { jsonInt($0["exit_status"]) == 0 })
        // Beside the broadcast: an update to three activities and one channel broadcast, made and deleted.
        let liveActivities = try #require(summary["live_activities"] as? [String: Any])
        let updateState = liveActivities["update_state"] as? String, broadcastState = liveActivities["broadcast_state"] as? String
        #expect(updateState == "done")
        #expect(jsonInt(liveActivities["update_delivered"]) == 3)
        #expect(broadcastState == "done")
        #expect(jsonInt(liveActivities["broadcast_requests"]) == 1)
        let channelID = liveActivities["channel_id"] as? String, channelDeleted = liveActivities["channel_deleted"] as? Bool
        #expect(channelID != nil)
        #expect(channelDeleted == true)
        let tokensSent: Int64 = workers.compactMap { jsonInt($0["tokens_sent"]) }.reduce(0, +)
        #expect(tokensSent == 3004, "the broadcast's 3,000, the 3 updates and the 1 channel broadcast")

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

@Suite("pgpush demo interrupted", .timeLimit(.minutes(3)), .database)
struct DemoInterruptTests {
    @Test("SIGINT mid-broadcast: exit 130, workers stopped, cluster stopped and removed")
    func interruptCleansUp() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-demo-int-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let output = directory.appendingPathComponent("out")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let process = Process()
        process.executableURL = CLIProcess.binary
        process.arguments = ["demo", "--devices", "50000", "--workers", "2", "--timeout", "120"]
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = process.standardOutput
        process.standardInput = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }

        func text() -> String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }
        try await eventually(timeout: .seconds(90)) { text().contains("worker(s) started") || !process.isRunning }
        try #require(process.isRunning, "demo ended early: \(text())")
        let lines = text().split(separator: "\n")
        let clusterLine = try #require(lines.first { $0.contains("PostgreSQL in ") })
        let cluster = try #require(clusterLine.split(separator: " ").first { $0.hasPrefix("/") }.map { String($0.dropLast()) })
        let appLine = try #require(lines.first { $0.contains("for app ") })
        let app = try #require(appLine.components(separatedBy: "for app ").last?.split(separator: ";").first.map(String.init))
        #expect(FileManager.default.fileExists(atPath: cluster))
        #expect(runningProcessMentions(app), "no worker of \(app) is running")

        kill(process.processIdentifier, SIGINT)
        try await eventually(timeout: .seconds(90)) { !process.isRunning }
        process.waitUntilExit()
        #expect(process.terminationStatus == 130, "\(text())")
        #expect(!FileManager.default.fileExists(atPath: cluster), "cluster directory \(cluster) left behind")
        #expect(!runningProcessMentions(cluster), "PostgreSQL of \(cluster) still runs")
        #expect(!runningProcessMentions(app), "a worker of \(app) still runs")
    }
}
