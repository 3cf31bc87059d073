import Foundation
import PGPushTestSupport
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

    @Test("--per-device-content: devices with locales, a broadcast with five variants and the increment, every device delivered and its badge counter moved once, the mode reported")
    func benchBroadcastWithPerDeviceContent() async throws {
        try await TestDatabase.with { db in
            // The bench removes its devices from a caller's database when it ends: keep what they were.
            try await db.exec("CREATE TABLE public.removed_devices (token text, platform text, locale text, badge int)")
            try await db.exec("""
                CREATE FUNCTION public.keep_removed_device() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO public.removed_devices VALUES (OLD.token, OLD.platform, OLD.locale, OLD.badge);
                    RETURN OLD;
                END $$
                """)
            try await db.exec("""
                CREATE TRIGGER keep_removed_device BEFORE DELETE ON push.devices
                   FOR EACH ROW EXECUTE FUNCTION public.keep_removed_device()
                """)

            let run = try await CLIProcess.run(
                ["bench", "broadcast", "--devices", "3000", "--android-share", "0.2", "--per-device-content",
                 "--database-url", db.urlString, "--latency-samples", "0", "--json", "--timeout", "150"],
                timeout: .seconds(200))
            #expect(run.status == 0, "\(run)")
            let report = try #require(try run.json() as? [String: Any], "\(run)")
            #expect(report["per_device_content"] as? Bool == true, "\(run)")
            #expect(report["job_state"] as? String == "done")
            #expect(jsonInt(report["delivered"]) == 3000, "\(run)")
            #expect(jsonInt(report["failed"]) == 0, "\(run)")
            #expect(jsonInt(report["simulator_accepted"]) == 3000, "\(run)")
            #expect(jsonInt(report["simulator_duplicates"]) == 0)

            // The broadcast went out with five variants and the increment, to 2,400 iOS and 600 Android devices.
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE badge = 'increment' AND delivered = 3000 AND android_delivered = 600
                   AND (SELECT count(*) FROM jsonb_object_keys(variants)) = 5
                """) == 1)
            // Every device's counter moved from 0 to 1, and the locales were spread, a sixth of them none.
            #expect(try await db.scalar("SELECT count(*) FROM public.removed_devices") == 3000)
            #expect(try await db.scalar("SELECT count(*) FROM public.removed_devices WHERE badge = 1") == 3000)
            #expect(try await db.scalar("SELECT count(*) FROM public.removed_devices WHERE locale IS NULL") == 500)
            #expect(try await db.scalar("SELECT count(DISTINCT locale) FROM public.removed_devices") == 7)
            #expect(try await db.scalar("""
                SELECT count(DISTINCT locale) FROM public.removed_devices WHERE platform = 'android'
                """) == 7)
        }
    }

    @Test("--per-device-content and --live-activity: usage error, a Live Activity has no badge")
    func perDeviceContentIsNotForLiveActivities() async throws {
        let run = try await CLIProcess.run(["bench", "broadcast", "--per-device-content", "--live-activity"])
        #expect(run.status == 64, "\(run)")
        #expect(run.stderr.contains("--per-device-content"), "\(run)")
    }

    @Test("an external simulator needs a key it trusts: usage error, nothing started")
    func externalSimulatorNeedsKey() async throws {
        let run = try await CLIProcess.run(
            ["bench", "broadcast", "--simulator-endpoint", "https://127.0.0.1:1", "--simulator-ca", "/nonexistent"])
        #expect(run.status == 64, "\(run)")
        #expect(run.stderr.contains("--key-file"))
    }
}
