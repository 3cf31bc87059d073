import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush devices import", .timeLimit(.minutes(3)), .database)
struct DevicesCommandTests {
    @Test("lines from stdin: tokens lowercased, blank lines and comments skipped, --json counts")
    func importLinesFromStdin() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let input = "\(TestTokens.token(1).uppercased())\n\n# a comment\n\(TestTokens.token(2))\r\n  \(TestTokens.token(3))  \n"
            let run = try await CLIProcess.run(
                ["devices", "import", "-", "--app", "news", "--database-url", db.urlString, "--json"], stdin: Data(input.utf8))
            #expect(run.status == 0, "\(run)")
            let object = try #require(try run.json() as? [String: Any])
            #expect(object["imported"] as? NSNumber == 3)
            #expect(object["inserted"] as? NSNumber == 3)
            #expect(object["updated"] as? NSNumber == 0)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE app_id = 'news' AND user_id IS NULL AND tags = '{}'
                   AND token IN (\(TestTokens.token(1)), \(TestTokens.token(2)), \(TestTokens.token(3)))
                """) == 3)
        }
    }

    @Test("CSV with quoting: user ids and tags survive COPY escaping byte for byte")
    func importCSVWithAwkwardValues() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let csv = [
                "token,user_id,tags",
                #"\#(TestTokens.token(1)),"back\slash",sports|eu; news"#,
                "\(TestTokens.token(2)),\"tab\there, \"\"quoted\"\"\",",
                "\(TestTokens.token(3)),\"two\nlines\r\",a|a|b",
                #"\#(TestTokens.token(4)),,\N"#,
                "",
            ].joined(separator: "\n")
            let file = try temporaryFile(csv, suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString])
            #expect(run.status == 0, "\(run)")
            #expect(run.stdout.contains("imported 4 devices into news: 4 new, 0 updated"), "\(run)")
            func user(_ index: Int, is expected: String?) async throws -> Bool {
                try await db.scalar("""
                    SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(index)) AND user_id IS NOT DISTINCT FROM \(expected)
                    """) == 1
            }
            #expect(try await user(1, is: "back\\slash"))
            #expect(try await user(2, is: "tab\there, \"quoted\""))
            #expect(try await user(3, is: "two\nlines\r"))
            #expect(try await user(4, is: nil))
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(1)) AND tags = ARRAY['sports','eu','news']") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(3)) AND tags = ARRAY['a','b']") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(4)) AND tags = ARRAY['\\N']") == 1)
        }
    }

    @Test("re-import updates user_id and tags and bumps registered_at; a lines file leaves them alone")
    func reimportBumpsRegisteredAt() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            try await db.exec("SELECT push.register_device('news', \(TestTokens.token(1)), 'old-user', ARRAY['old'])")
            try await db.exec("UPDATE push.devices SET registered_at = now() - interval '30 days'")
            let tsv = "token\tuser_id\ttags\n\(TestTokens.token(1))\tnew-user\tfresh\n\(TestTokens.token(1))\tlast-wins\tfinal\n"
            let file = try temporaryFile(tsv, suffix: ".tsv")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString, "--json"])
            #expect(run.status == 0, "\(run)")
            let object = try #require(try run.json() as? [String: Any])
            #expect(object["updated"] as? NSNumber == 1)
            #expect(object["inserted"] as? NSNumber == 0)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE user_id = 'last-wins' AND tags = ARRAY['final']
                   AND registered_at > now() - interval '1 minute'
                """) == 1)

            try await db.exec("UPDATE push.devices SET registered_at = now() - interval '30 days'")
            let lines = try await CLIProcess.run(
                ["devices", "import", "-", "--app", "news", "--database-url", db.urlString], stdin: Data(TestTokens.token(1).utf8))
            #expect(lines.status == 0, "\(lines)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE user_id = 'last-wins' AND tags = ARRAY['final']
                   AND registered_at > now() - interval '1 minute'
                """) == 1)
        }
    }

    @Test("one invalid token: exit 1 naming its line, nothing imported")
    func invalidTokenImportsNothing() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let input = "\(TestTokens.token(1))\n\(TestTokens.token(2))\nnot-a-token-at-all\n\(TestTokens.token(3))\n"
            let run = try await CLIProcess.run(
                ["devices", "import", "-", "--app", "news", "--database-url", db.urlString], stdin: Data(input.utf8))
            #expect(run.status == 1, "\(run)")
            #expect(run.stderr.contains("line 3: invalid device token 'not-a-to…'"), "\(run)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)

            let short = String(TestTokens.token(5).prefix(63))
            let csv = "token,user_id\n\(TestTokens.token(4)),u\n\(short),v\n"
            let file = try temporaryFile(csv, suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: file) }
            let csvRun = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString])
            #expect(csvRun.status == 1, "\(csvRun)")
            #expect(csvRun.stderr.contains("line 3:"), "\(csvRun)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)

            let noHeader = try await CLIProcess.run(
                ["devices", "import", "-", "--format", "csv", "--app", "news", "--database-url", db.urlString],
                stdin: Data("\(TestTokens.token(1)),u\n".utf8))
            #expect(noHeader.status == 1 && noHeader.stderr.contains("line 1: expected a header"), "\(noHeader)")
        }
    }

    @Test("a locale column: normalised as push.normalize_locale does (fr_CA is fr-ca); a re-import without one keeps it")
    func importLocales() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            try await db.exec("SELECT push.register_device('news', \(TestTokens.token(3)), locale => 'de')")
            let csv = "token,user_id,locale\n\(TestTokens.token(1)),u1,fr_CA\n\(TestTokens.token(2)),u2, PT-br \n\(TestTokens.token(3)),u3,\n"
            let file = try temporaryFile(csv, suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString])
            #expect(run.status == 0, "\(run)")
            func locale(_ index: Int) async throws -> String? {
                let rows = try await db.exec("SELECT locale FROM push.devices WHERE token = \(TestTokens.token(index))")
                return try #require(rows.first).decode(String?.self)
            }
            #expect(try await locale(1) == "fr-ca")
            #expect(try await locale(2) == "pt-br")
            // An empty locale field keeps the one the device registered with.
            #expect(try await locale(3) == "de")

            // Neither a file without the column nor one with it empty takes a locale away.
            let lines = try await CLIProcess.run(
                ["devices", "import", "-", "--app", "news", "--database-url", db.urlString], stdin: Data(TestTokens.token(1).utf8))
            #expect(lines.status == 0, "\(lines)")
            let tsv = try temporaryFile("token\tlocale\n\(TestTokens.token(2))\t\n\(TestTokens.token(3))\tzh_Hant_TW\n", suffix: ".tsv")
            defer { try? FileManager.default.removeItem(at: tsv) }
            let again = try await CLIProcess.run(["devices", "import", tsv.path, "--app", "news", "--database-url", db.urlString])
            #expect(again.status == 0, "\(again)")
            #expect(try await locale(1) == "fr-ca")
            #expect(try await locale(2) == "pt-br")
            #expect(try await locale(3) == "zh-hant-tw")
        }
    }

    @Test("a malformed locale: exit 1 naming its line and the field, nothing imported or changed")
    func malformedLocaleImportsNothing() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            try await db.exec("SELECT push.register_device('news', \(TestTokens.token(1)), 'u1', locale => 'en')")
            for bad in ["english", "e", "fr--ca", "fr-", "fr-toolongsubtag", "fr ca", "français", "en-" + Array(repeating: "a1b2c3d4", count: 4).joined(separator: "-")] {
                let csv = "token,user_id,locale\n\(TestTokens.token(1)),u2,fr\n\(TestTokens.token(2)),u2,\"\(bad)\"\n"
                let file = try temporaryFile(csv, suffix: ".csv")
                defer { try? FileManager.default.removeItem(at: file) }
                let run = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString])
                #expect(run.status == 1, "\(bad): \(run)")
                #expect(run.stderr.contains("line 3: locale '"), "\(bad): \(run)")
                #expect(run.stderr.contains("is not a BCP 47 language tag"), "\(bad): \(run)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE user_id = 'u1' AND locale = 'en'") == 1)
        }
    }

    @Test("an unknown app exits 2")
    func unknownApp() async throws {
        try await TestDatabase.with { db in
            let run = try await CLIProcess.run(
                ["devices", "import", "-", "--app", "nope", "--database-url", db.urlString], stdin: Data(TestTokens.token(1).utf8))
            #expect(run.status == 2, "\(run)")
            #expect(run.stderr.contains("pgpush: unknown app nope"), "\(run)")
        }
    }
}

@Suite("pgpush devices set-badge", .timeLimit(.minutes(3)), .database)
struct DevicesSetBadgeCommandTests {
    @Test("by token (any case) or by user: sets the counters and says how many; 0 by default")
    func setBadge() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            for (index, user) in [(1, "u1"), (2, "u2"), (3, "u2")] {
                try await db.exec("SELECT push.register_device('news', \(TestTokens.token(index)), \(user))")
            }
            func badges() async throws -> [Int64] {
                var values: [Int64] = []
                for index in 1...3 {
                    values.append(try await db.scalar("SELECT badge::bigint FROM push.devices WHERE token = \(TestTokens.token(index))"))
                }
                return values
            }
            let byToken = try await CLIProcess.run([
                "devices", "set-badge", "--app", "news", "--token", TestTokens.token(1).uppercased(), "--value", "5",
                "--database-url", db.urlString,
            ])
            #expect(byToken.status == 0, "\(byToken)")
            #expect(byToken.stdout.contains("set the badge of 1 device of news to 5"), "\(byToken)")
            #expect(try await badges() == [5, 0, 0])

            let byUser = try await CLIProcess.run([
                "devices", "set-badge", "--app", "news", "--user", "u2", "--value", "3", "--json", "--database-url", db.urlString,
            ])
            #expect(byUser.status == 0, "\(byUser)")
            let object = try #require(try byUser.json() as? [String: Any], "\(byUser)")
            #expect(object["devices"] as? NSNumber == 2)
            #expect(object["app_id"] as? String == "news")
            #expect(try await badges() == [5, 3, 3])

            let cleared = try await CLIProcess.run(
                ["devices", "set-badge", "--app", "news", "--user", "u2", "--database-url", db.urlString])
            #expect(cleared.status == 0, "\(cleared)")
            let nobody = try await CLIProcess.run(
                ["devices", "set-badge", "--app", "news", "--user", "nobody", "--database-url", db.urlString, "--json"])
            #expect(nobody.status == 0, "\(nobody)")
            #expect((try nobody.json() as? [String: Any])?["devices"] as? NSNumber == 0, "\(nobody)")
            #expect(try await badges() == [5, 0, 0])
        }
    }

    @Test("the database's refusals: unknown token or app exit 2, a negative value exits 1 naming it; usage exits 64")
    func refusals() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            try await db.exec("SELECT push.register_device('news', \(TestTokens.token(1)), 'u1')")
            let unknownToken = try await CLIProcess.run(
                ["devices", "set-badge", "--app", "news", "--token", TestTokens.token(2), "--database-url", db.urlString])
            #expect(unknownToken.status == 2, "\(unknownToken)")
            #expect(unknownToken.stderr.contains("pgpush: unknown device: app news has no token"), "\(unknownToken)")
            let unknownApp = try await CLIProcess.run(
                ["devices", "set-badge", "--app", "nope", "--user", "u1", "--database-url", db.urlString])
            #expect(unknownApp.status == 2, "\(unknownApp)")
            #expect(unknownApp.stderr.contains("pgpush: unknown app_id: nope"), "\(unknownApp)")
            let negative = try await CLIProcess.run(
                ["devices", "set-badge", "--app", "news", "--user", "u1", "--value=-1", "--database-url", db.urlString])
            #expect(negative.status == 1, "\(negative)")
            #expect(negative.stderr.contains("pgpush: value must be 0 or more, not -1"), "\(negative)")
            #expect(try await db.scalar("SELECT badge::bigint FROM push.devices") == 0)

            for usage in [["--app", "news"], ["--app", "news", "--user", "u1", "--token", TestTokens.token(1)]] {
                let run = try await CLIProcess.run(["devices", "set-badge", "--database-url", db.urlString] + usage)
                #expect(run.status == 64, "\(usage): \(run)")
            }
        }
    }
}

@Suite("pgpush devices import and enqueue for Android", .timeLimit(.minutes(3)), .database)
struct AndroidCLITests {
    static let fcmToken = "dXyZ0123456789abcdEFGH:APA91bF1rst_Token"

    static func createDualApp(_ db: TestDatabase) async throws {
        try await db.exec("""
            INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path, fcm_project_id, fcm_service_account_path)
            VALUES ('news', 'com.example.news', 'TEAM123456', 'KEY1234567', '/k.p8', 'news-7f3a', '/sa.json')
            """)
    }

    @Test("--platform android keeps FCM tokens as given; a csv platform column sets each row; a bad row imports nothing")
    func importAndroidDevices() async throws {
        try await TestDatabase.with { db in
            try await Self.createDualApp(db)
            let lines = try await CLIProcess.run(
                ["devices", "import", "-", "--app", "news", "--platform", "android", "--database-url", db.urlString],
                stdin: Data("\(Self.fcmToken)\n".utf8))
            #expect(lines.status == 0, "\(lines)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(Self.fcmToken) AND platform = 'android'") == 1)

            let csv = "token,user_id,platform\n\(TestTokens.token(1).uppercased()),u1,ios\nOtherFcmToken_0123456789,u1,android\n\(TestTokens.token(2)),u2,\n"
            let file = try temporaryFile(csv, suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: file) }
            let mixed = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString])
            #expect(mixed.status == 0, "\(mixed)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices
                 WHERE (token = \(TestTokens.token(1)) AND platform = 'ios') OR (token = \(TestTokens.token(2)) AND platform = 'ios')
                    OR (token = 'OtherFcmToken_0123456789' AND platform = 'android')
                """) == 3)

            for (input, platform, expected) in [
                ("has a space 0123456789abc\n", "android", "an FCM registration token is 16 to 1024"),
                ("\(Self.fcmToken)\n", "ios", "a token is 64 to 200 hex characters"),
            ] {
                let bad = try await CLIProcess.run(
                    ["devices", "import", "-", "--app", "news", "--platform", platform, "--database-url", db.urlString],
                    stdin: Data(input.utf8))
                #expect(bad.status == 1, "\(bad)")
                #expect(bad.stderr.contains(expected), "\(bad)")
            }
            let badColumn = try temporaryFile("token,platform\n\(TestTokens.token(3)),windows\n", suffix: ".csv")
            defer { try? FileManager.default.removeItem(at: badColumn) }
            let refused = try await CLIProcess.run(["devices", "import", badColumn.path, "--app", "news", "--database-url", db.urlString])
            #expect(refused.status == 1 && refused.stderr.contains("platform 'windows' is not ios or android"), "\(refused)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 4)
        }
    }

    @Test("enqueue --fcm stores the Android message; an Android-only app needs no payload; a bad message exits 1")
    func enqueueWithFCM() async throws {
        try await TestDatabase.with { db in
            try await Self.createDualApp(db)
            try await db.exec("INSERT INTO push.apps (id, fcm_project_id, fcm_service_account_path) VALUES ('droid', 'droid-1', '/sa.json')")
            let dual = try await CLIProcess.run([
                "enqueue", "--app", "news", "--alert", "Goal!", "--fcm", #"{"data":{"match":"77"}}"#, "--database-url", db.urlString,
            ])
            #expect(dual.status == 0, "\(dual)")
            #expect(try await db.scalar(#"SELECT count(*) FROM push.jobs WHERE app_id = 'news' AND fcm = '{"data":{"match":"77"}}'"#) == 1)

            let android = try await CLIProcess.run([
                "enqueue", "--app", "droid", "--fcm", #"{"notification":{"title":"Hi"}}"#, "--database-url", db.urlString,
            ])
            #expect(android.status == 0, "\(android)")
            let jobFile = try temporaryFile(#"{"app_id":"droid","fcm":{"data":{"k":"v"}}}"#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: jobFile) }
            let fromFile = try await CLIProcess.run(["enqueue", "--file", jobFile.path, "--database-url", db.urlString])
            #expect(fromFile.status == 0, "\(fromFile)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE app_id = 'droid' AND payload = '{}'") == 2)

            let bad = try await CLIProcess.run([
                "enqueue", "--app", "droid", "--fcm", #"{"data":{"n":1}}"#, "--database-url", db.urlString,
            ])
            #expect(bad.status == 1, "\(bad)")
            #expect(bad.stderr.contains("fcm.data.n must be a string"), "\(bad)")
            let none = try await CLIProcess.run(["enqueue", "--app", "droid", "--database-url", db.urlString])
            #expect(none.status == 64, "\(none)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 3)
        }
    }
}
