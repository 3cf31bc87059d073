import Foundation
import Testing

/// `--stand-in nginx` and `--h2load`: the benches measure pgpush against a C HTTP/2 server and print their
/// rate as a share of h2load's against the same server in the same run. `scripts/test` installs nginx and
/// h2load (Debian's nginx and nghttp2-client).
@Suite("pgpush bench against nginx beside h2load", .timeLimit(.minutes(4)), .database)
struct BenchH2LoadRatioTests {
    @Test("bench broadcast --stand-in nginx --h2load: every token answered by nginx, h2load's rate and the ratio reported")
    func broadcastBesideH2Load() async throws {
        let run = try await CLIProcess.run(
            ["bench", "broadcast", "--devices", "3000", "--stand-in", "nginx", "--h2load", "--latency-samples", "0",
             "--json", "--timeout", "150"],
            timeout: .seconds(200))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(report["job_state"] as? String == "done")
        #expect(report["stand_in"] as? String == "nginx")
        // nginx answers 200 to every request: all 3,000 delivered. More than 200 resets within 30 s would end
        // a connection (NIO's rapid-reset guard), so this also shows the stand-in reads each body first.
        #expect(jsonInt(report["delivered"]) == 3000, "\(run)")
        #expect(jsonInt(report["failed"]) == 0, "\(run)")
        let h2load = try #require(report["h2load"] as? [String: Any], "\(run)")
        #expect(jsonInt(h2load["requests"]) == 3000)
        #expect(jsonInt(h2load["succeeded"]) == 3000, "\(h2load)")
        #expect(jsonInt(h2load["connections"]) == 4 && jsonInt(h2load["streams"]) == 100)
        let h2loadRate = try #require(jsonDouble(h2load["requests_per_second"]))
        let rate = try #require(jsonDouble(report["tokens_per_second"]))
        let share = try #require(jsonDouble(report["share_of_h2load"]), "\(run)")
        #expect(h2loadRate > 0 && rate > 0)
        #expect(abs(share - rate / h2loadRate) < 1e-6 * max(share, 1))
        #expect((jsonDouble(report["worker_cpu_us_per_token"]) ?? 0) > 0)
        // h2load's own CPU per request, beside the worker's per token: the two loops compared in one run.
        #expect((jsonDouble(h2load["cpu_us_per_request"]) ?? 0) > 0, "\(h2load)")
    }

    @Test("bench transport --stand-in nginx --h2load: the transport's rate beside h2load's")
    func transportBesideH2Load() async throws {
        let run = try await CLIProcess.run(
            ["bench", "transport", "--stand-in", "nginx", "--h2load", "--topic", "com.example.pgpush", "--count", "3000",
             "--connections", "2", "--json", "--timeout", "60"],
            timeout: .seconds(120))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(jsonInt(report["succeeded"]) == 3000, "\(run)")
        let h2loadRate = try #require(jsonDouble(report["h2loadRequestsPerSecond"]), "\(run)")
        let rate = try #require(jsonDouble(report["notificationsPerSecond"]))
        let share = try #require(jsonDouble(report["shareOfH2Load"]))
        #expect(h2loadRate > 0)
        #expect(abs(share - rate / h2loadRate) < 1e-6 * max(share, 1))
        // Both loops' CPU per request, measured in the same run.
        #expect((jsonDouble(report["cpuMicrosecondsPerNotification"]) ?? 0) > 0, "\(run)")
        #expect((jsonDouble(report["h2loadCPUMicrosecondsPerRequest"]) ?? 0) > 0, "\(run)")
    }

    @Test("bench transport --http2-engine both: one run per engine against the same nginx, both reported")
    func transportOnBothEngines() async throws {
        let run = try await CLIProcess.run(
            ["bench", "transport", "--stand-in", "nginx", "--http2-engine", "both", "--topic", "com.example.pgpush", "--count", "2000",
             "--connections", "2", "--json", "--timeout", "60"],
            timeout: .seconds(120))
        #expect(run.status == 0, "\(run)")
        let reports = try #require(try run.json() as? [[String: Any]], "\(run)")
        #expect(reports.map { $0["http2Engine"] as? String } == ["nio", "nghttp2"])
        for report in reports {
            #expect(jsonInt(report["succeeded"]) == 2000, "\(report)")
            #expect((jsonDouble(report["notificationsPerSecond"]) ?? 0) > 0)
        }
    }

    @Test("the ratio flags refuse what they cannot measure, before starting anything")
    func refusals() async throws {
        let android = try await CLIProcess.run(["bench", "broadcast", "--stand-in", "nginx", "--android-share", "0.3"])
        #expect(android.status == 64, "\(android)")
        #expect(android.stderr.contains("APNs only"), "\(android)")
        let latency = try await CLIProcess.run(["bench", "broadcast", "--stand-in", "nginx", "--latency-ms", "30"])
        #expect(latency.status == 64, "\(latency)")
        let both = try await CLIProcess.run(
            ["bench", "transport", "--stand-in", "nginx", "--endpoint", "https://127.0.0.1:1", "--topic", "t"])
        #expect(both.status == 64, "\(both)")
        let neither = try await CLIProcess.run(["bench", "transport", "--topic", "t"])
        #expect(neither.status == 64, "\(neither)")
    }
}
