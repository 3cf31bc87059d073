import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush demo with web subscriptions", .timeLimit(.minutes(4)), .database)
struct DemoWebPushTests {
    @Test("--web-share 0.5 --android-share 0: half the live devices are browsers, registered through push.register_device (the first 1,000) and directly, delivered over HTTP/2 once each, the dead ones 404/410 and pruned; the summary shows web on its own")
    func halfTheDevicesAreBrowsers() async throws {
        try await TestDatabase.with { db in
            // The demo removes its devices from a caller's database when it ends: keep what they were.
            try await db.exec("CREATE TABLE public.removed_devices (token text, platform text, web_p256dh text, web_auth text)")
            try await db.exec("""
                CREATE FUNCTION public.keep_removed_device() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO public.removed_devices VALUES (OLD.token, OLD.platform, OLD.web_p256dh, OLD.web_auth);
                    RETURN OLD;
                END $$
                """)
            try await db.exec("""
                CREATE TRIGGER keep_removed_device BEFORE DELETE ON push.devices
                   FOR EACH ROW EXECUTE FUNCTION public.keep_removed_device()
                """)
            let run = try await CLIProcess.run(
                ["demo", "--devices", "3000", "--workers", "1", "--android-share", "0", "--web-share", "0.5",
                 "--database-url", db.urlString, "--json", "--timeout", "150"],
                timeout: .seconds(220))
            #expect(run.status == 0, "\(run)")
            let summary = try #require(try run.json() as? [String: Any], "\(run)")
            // Of 3,000: 60 dead (30 of them web: 15 answered 404, 15 answered 410), 15 malformed, 2,925 live of
            // which 1,463 web subscriptions.
            let devices = try #require(summary["devices"] as? [String: Any])
            #expect(jsonInt(devices["web"]) == 1463)
            #expect(jsonInt(devices["web_dead"]) == 30)
            #expect(jsonInt(devices["web_through_api"]) == 1000)
            #expect(jsonInt(devices["android"]) == 0)
            #expect(jsonInt(devices["ios"]) == 1507, "the rest of 3,000")

            let platforms = try #require(summary["platforms"] as? [[String: Any]])
            let web = try #require(platforms.first { $0["platform"] as? String == "web" })
            #expect(jsonInt(web["total"]) == 1493)
            #expect(jsonInt(web["delivered"]) == 1463)
            #expect(jsonInt(web["failed"]) == 30)
            let job = try #require(summary["job"] as? [String: Any])
            #expect(job["state"] as? String == "done")
            // The iOS tokens answered 410 and the web subscriptions answered 404 or 410; with no Android devices in
            // the valve's window, the malformed iOS tokens too.
            #expect(jsonInt(job["pruned"]) == 75)

            let simulator = try #require(summary["simulator"] as? [String: Any])
            let webPush = try #require(simulator["web_push"] as? [String: Any])
            #expect(jsonInt(webPush["accepted"]) == 1463)
            #expect(jsonInt(webPush["duplicates"]) == 0)
            #expect(jsonInt(webPush["http2"]) == 1463)
            #expect(jsonInt(simulator["accepted"]) == 2925)
            #expect(jsonInt(simulator["duplicates"]) == 0)

            // What push.register_device stored and what the direct path stored look alike: base64url keys of the
            // right lengths, endpoints on the simulator's origin (the dead ones removed by the pruner, the rest by
            // the demo's clean-up).
            #expect(try await db.scalar("SELECT count(*) FROM public.removed_devices WHERE platform = 'web'") == 1493)
            #expect(try await db.scalar("""
                SELECT count(*) FROM public.removed_devices
                 WHERE platform = 'web' AND length(web_p256dh) = 87 AND length(web_auth) = 22
                   AND token LIKE 'https://localhost:%/push/%'
                """) == 1493)
            #expect(try await db.scalar("SELECT count(*) FROM push.pruned_devices WHERE reason IN ('Gone', 'NotFound')") == 30)
        }
    }

    @Test("--web-share 0: no Web Push simulator, no web figures")
    func noBrowsers() async throws {
        let run = try await CLIProcess.run(
            ["demo", "--devices", "500", "--workers", "1", "--web-share", "0", "--timeout", "120"], timeout: .seconds(200))
        #expect(run.status == 0, "\(run)")
        #expect(!run.stdout.contains("Web Push accepted"), "\(run)")
        #expect(run.stdout.contains("APNs accepted"), "\(run)")
    }

    @Test("--web-share and --android-share over 1 together, or --web-share out of range: usage error")
    func sharesAreChecked() async throws {
        let over = try await CLIProcess.run(["demo", "--android-share", "0.7", "--web-share", "0.5"])
        #expect(over.status == 64, "\(over)")
        #expect(over.stderr.contains("--web-share"), "\(over)")
        let negative = try await CLIProcess.run(["demo", "--web-share", "-0.1"])
        #expect(negative.status == 64, "\(negative)")
    }
}
