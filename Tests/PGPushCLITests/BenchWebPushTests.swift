import Foundation
import Testing

@Suite("pgpush bench broadcast --web-share", .timeLimit(.minutes(5)), .database)
struct BenchWebPushTests {
    @Test("--web-share 1: every device a browser, each message accepted once by the Web Push simulator, web messages/s and CPU per web message reported")
    func browsersOnly() async throws {
        let run = try await CLIProcess.run(
            ["bench", "broadcast", "--devices", "300", "--web-share", "1", "--latency-samples", "0", "--json", "--timeout", "150"],
            timeout: .seconds(200))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(report["job_state"] as? String == "done")
        #expect(jsonInt(report["tokens"]) == 300)
        #expect(jsonInt(report["delivered"]) == 300)
        #expect(jsonInt(report["web_messages"]) == 300)
        #expect(report["web_push_answered_by"] as? String == "simulator")
        let rate = try #require((report["web_messages_per_second"] as? NSNumber)?.doubleValue)
        #expect(rate > 0)
        let cpu = try #require((report["worker_cpu_us_per_web_message"] as? NSNumber)?.doubleValue)
        #expect(cpu == (report["worker_cpu_us_per_token"] as? NSNumber)?.doubleValue)
        let ledger = try #require(report["web_push_simulator"] as? [String: Any])
        #expect(jsonInt(ledger["accepted"]) == 300)
        #expect(jsonInt(ledger["duplicates"]) == 0)
        #expect(jsonInt(report["simulator_accepted"]) == 300)
    }

    @Test("--web-share 0.5 --alternate-apns --rounds 1: a mixed broadcast, then one to as many iOS devices; both runs and the ratio reported")
    func alternatingWithAPNs() async throws {
        let run = try await CLIProcess.run(
            ["bench", "broadcast", "--devices", "400", "--web-share", "0.5", "--alternate-apns", "--latency-samples", "0",
             "--json", "--timeout", "150"],
            timeout: .seconds(280))
        #expect(run.status == 0, "\(run)")
        let series = try #require(try run.json() as? [String: Any], "\(run)")
        let runs = try #require(series["runs"] as? [[String: Any]])
        #expect(runs.count == 2)
        #expect((runs.first?["web_share"] as? NSNumber)?.doubleValue == 0.5)
        #expect(jsonInt(runs.first?["web_messages"]) == 200)
        #expect(jsonInt(runs.first?["delivered"]) == 400)
        // In a mixed audience the CPU of a web message cannot be told from an APNs token's.
        #expect(runs.first?["worker_cpu_us_per_web_message"] is NSNull)
        #expect((runs.last?["web_share"] as? NSNumber)?.doubleValue == 0)
        #expect(jsonInt(runs.last?["delivered"]) == 400)
        #expect(runs.last?["web_messages"] is NSNull)
        #expect((series["web_to_apns_ratios"] as? [Double])?.count == 1)
        #expect(((series["median_web_to_apns_ratio"] as? NSNumber)?.doubleValue ?? 0) > 0)
        #expect(((series["median_tokens_per_second_without_web"] as? NSNumber)?.doubleValue ?? 0) > 0)
    }

    @Test("--web-share 1 --stand-in nginx: the subscriptions are on nginx, which answers 200; every message delivered", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx")))
    func nginxStandsInForThePushService() async throws {
        let run = try await CLIProcess.run(
            ["bench", "broadcast", "--devices", "300", "--web-share", "1", "--stand-in", "nginx", "--latency-samples", "0",
             "--json", "--timeout", "150"],
            timeout: .seconds(200))
        #expect(run.status == 0, "\(run)")
        let report = try #require(try run.json() as? [String: Any], "\(run)")
        #expect(jsonInt(report["delivered"]) == 300)
        #expect(jsonInt(report["web_messages"]) == 300)
        #expect(report["web_push_answered_by"] as? String == "nginx")
        #expect(report["web_push_simulator"] is NSNull)
    }

    @Test("usage errors: --alternate-apns without --web-share, --web-share with --h2load or --live-activity, shares over 1")
    func usageErrors() async throws {
        for arguments in [
            ["--alternate-apns"], ["--web-share", "1", "--h2load"], ["--web-share", "0.5", "--live-activity"],
            ["--web-share", "0.6", "--android-share", "0.6"], ["--web-share", "1", "--rounds", "0"],
        ] {
            let run = try await CLIProcess.run(["bench", "broadcast"] + arguments)
            #expect(run.status == 64, "\(arguments): \(run)")
        }
    }
}
