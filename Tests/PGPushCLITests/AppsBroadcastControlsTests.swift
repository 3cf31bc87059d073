import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush apps set-broadcast-controls, devices --timezone", .timeLimit(.minutes(3)), .database)
struct AppsBroadcastControlsTests {
    @Test("sets what is given and keeps the rest; list shows the controls; --no-* clears them")
    func setListAndClear() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let set = try await CLIProcess.run([
                "apps", "set-broadcast-controls", "news", "--database-url", db.urlString, "--default-timezone", "Europe/Paris",
                "--quiet-hours", "22:00-08:00", "--frequency-caps", #"{"marketing": {"max": 3, "per": "24 hours"}}"#,
            ])
            #expect(set.status == 0, "\(set)")
            #expect(set.stdout.contains("time zone Europe/Paris, quiet hours 22:00-08:00"), "\(set)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.apps WHERE id = 'news' AND default_timezone = 'Europe/Paris'
                   AND quiet_hours = '22:00-08:00' AND frequency_caps = '{"marketing": {"max": 3, "per": "24 hours"}}'::jsonb
                """) == 1)

            // Only the zone: the window and the caps stay.
            let zone = try await CLIProcess.run([
                "apps", "set-broadcast-controls", "news", "--database-url", db.urlString, "--default-timezone", "Asia/Tokyo", "--json",
            ])
            #expect(zone.status == 0, "\(zone)")
            let object = try #require(try zone.json() as? [String: Any])
            #expect(object["default_timezone"] as? String == "Asia/Tokyo")
            #expect(object["quiet_hours"] as? String == "22:00-08:00")
            #expect(((object["frequency_caps"] as? [String: Any])?["marketing"] as? [String: Any])?["max"] as? NSNumber == 3)

            let list = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString, "--json"])
            let app = try #require((try list.json() as? [[String: Any]])?.first)
            #expect(app["default_timezone"] as? String == "Asia/Tokyo")
            #expect(app["quiet_hours"] as? String == "22:00-08:00")
            #expect(app["frequency_caps"] is [String: Any])
            let table = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString])
            #expect(table.stdout.contains("QUIET HOURS") && table.stdout.contains("marketing 3/24 hours"), "\(table)")

            let clear = try await CLIProcess.run([
                "apps", "set-broadcast-controls", "news", "--database-url", db.urlString, "--no-quiet-hours", "--no-frequency-caps",
            ])
            #expect(clear.status == 0, "\(clear)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.apps WHERE id = 'news' AND default_timezone = 'Asia/Tokyo'
                   AND quiet_hours IS NULL AND frequency_caps IS NULL
                """) == 1)
        }
    }

    @Test("refusals: the trigger's message naming the field (exit 1, nothing changed), an unknown app exits 2, no option 64")
    func refusals() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let base = ["apps", "set-broadcast-controls", "news", "--database-url", db.urlString]
            let zone = try await CLIProcess.run(base + ["--default-timezone", "Mars/Olympus"])
            #expect(zone.status == 1, "\(zone)")
            #expect(zone.stderr.contains("default_timezone 'Mars/Olympus' is not a time zone PostgreSQL knows"), "\(zone)")
            let window = try await CLIProcess.run(base + ["--quiet-hours", "22h-8h"])
            #expect(window.status == 1, "\(window)")
            #expect(window.stderr.contains("quiet_hours '22h-8h' must be a daily window 'HH:MM-HH:MM'"), "\(window)")
            let caps = try await CLIProcess.run(base + ["--frequency-caps", #"{"marketing": {"max": 0, "per": "1 day"}}"#])
            #expect(caps.status == 1, "\(caps)")
            #expect(caps.stderr.contains("frequency_caps: marketing.max must be a whole number of jobs from 1 to 10000"), "\(caps)")
            let json = try await CLIProcess.run(base + ["--frequency-caps", "{marketing"])
            #expect(json.status == 1, "\(json)")
            #expect(json.stderr.contains("frequency_caps is not valid JSON"), "\(json)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.apps WHERE id = 'news' AND default_timezone = 'UTC' AND quiet_hours IS NULL
                   AND frequency_caps IS NULL
                """) == 1)

            let unknown = try await CLIProcess.run(["apps", "set-broadcast-controls", "nope", "--database-url", db.urlString, "--no-quiet-hours"])
            #expect(unknown.status == 2, "\(unknown)")
            #expect(unknown.stderr.contains("unknown app nope"), "\(unknown)")
            let nothing = try await CLIProcess.run(base)
            #expect(nothing.status == 64, "\(nothing)")
            let both = try await CLIProcess.run(base + ["--quiet-hours", "22:00-08:00", "--no-quiet-hours"])
            #expect(both.status == 64, "\(both)")
        }
    }

    @Test("devices add --timezone stores the zone, a later registration without one keeps it; an unknown zone is refused by name")
    func devicesAddTimezone() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let add = try await CLIProcess.run([
                "devices", "add", "--database-url", db.urlString, "--app", "news", "--token", TestTokens.token(1),
                "--timezone", "Europe/Paris",
            ])
            #expect(add.status == 0, "\(add)")
            let again = try await CLIProcess.run([
                "devices", "add", "--database-url", db.urlString, "--app", "news", "--token", TestTokens.token(1), "--user", "42",
            ])
            #expect(again.status == 0, "\(again)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(1)) AND timezone = 'Europe/Paris' AND user_id = '42'
                """) == 1)
            let bad = try await CLIProcess.run([
                "devices", "add", "--database-url", db.urlString, "--app", "news", "--token", TestTokens.token(2),
                "--timezone", "Europe/Atlantis",
            ])
            #expect(bad.status == 1, "\(bad)")
            #expect(bad.stderr.contains("timezone 'Europe/Atlantis' is not a time zone PostgreSQL knows"), "\(bad)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(2))") == 0)
        }
    }

    @Test("devices import: a timezone column sets each device's zone, an empty one keeps it; an unknown zone names its line and imports nothing")
    func devicesImportTimezone() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            try await db.exec("SELECT push.register_device('news', \(TestTokens.token(3)), timezone => 'Asia/Tokyo')")
            let csv = "token,timezone\n\(TestTokens.token(1)),America/New_York\n\(TestTokens.token(2)), Europe/Paris \n\(TestTokens.token(3)),\n"
            let file = try temporaryFile(csv, suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString])
            #expect(run.status == 0, "\(run)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(1)) AND timezone = 'America/New_York'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(2)) AND timezone = 'Europe/Paris'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(3)) AND timezone = 'Asia/Tokyo'") == 1)

            let bad = try temporaryFile("token,timezone\n\(TestTokens.token(4)),UTC\n\(TestTokens.token(5)),Moon/Base\n", suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: bad) }
            let refused = try await CLIProcess.run(["devices", "import", bad.path, "--app", "news", "--database-url", db.urlString])
            #expect(refused.status == 1, "\(refused)")
            #expect(refused.stderr.contains("line 3: timezone 'Moon/Base' is not a time zone PostgreSQL knows"), "\(refused)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token IN (\(TestTokens.token(4)), \(TestTokens.token(5)))") == 0)
        }
    }

    @Test("devices import of Web Push subscriptions (jsonl) takes a timezone key; a non-string one names its line")
    func devicesImportJSONLTimezone() async throws {
        try await TestDatabase.with { db in
            let key = try await WebPushFixtures.addWebApp(db)
            defer { try? FileManager.default.removeItem(at: key) }
            let lines = [
                #"{"subscription": \#(WebPushFixtures.subscription(1)), "timezone": "Australia/Sydney"}"#,
                #"{"subscription": \#(WebPushFixtures.subscription(2)), "user_id": "42"}"#,
            ].joined(separator: "\n")
            let file = try temporaryFile(lines, suffix: ".jsonl")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString])
            #expect(run.status == 0, "\(run)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE token = \(WebPushFixtures.endpoint(1)) AND timezone = 'Australia/Sydney'
                """) == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(WebPushFixtures.endpoint(2)) AND timezone IS NULL") == 1)

            let bad = try temporaryFile(#"{"subscription": \#(WebPushFixtures.subscription(3)), "timezone": 2}"#, suffix: ".jsonl")
            defer { try? FileManager.default.removeItem(at: bad) }
            let refused = try await CLIProcess.run(["devices", "import", bad.path, "--app", "news", "--database-url", db.urlString])
            #expect(refused.status == 1, "\(refused)")
            #expect(refused.stderr.contains("line 1: timezone must be a string"), "\(refused)")
        }
    }
}
