import Foundation
import PGPushTestSupport
import Testing

/// `pgpush devices add` (device tokens and Web Push subscriptions) and `devices import`'s refusal of web devices.
@Suite("pgpush devices add", .timeLimit(.minutes(3)), .database)
struct WebPushDevicesCommandTests {
    @Test("--subscription FILE registers a web device: the endpoint is its token, the keys are stored; - reads stdin")
    func addSubscription() async throws {
        try await TestDatabase.with { db in
            let key = try await WebPushFixtures.addWebApp(db)
            let file = try temporaryFile(WebPushFixtures.subscription(1), suffix: ".json")
            defer { for url in [key, file] { try? FileManager.default.removeItem(at: url) } }

            let add = try await CLIProcess.run([
                "devices", "add", "--app", "news", "--platform", "web", "--subscription", file.path, "--user", "42",
                "--tag", "sports", "--tag", "eu", "--database-url", db.urlString,
            ])
            #expect(add.status == 0, "\(add)")
            #expect(add.stdout.contains("pgpush: registered a Web Push subscription on https://updates.push.services.mozilla.com for news"), "\(add)")
            #expect(!add.stdout.contains(WebPushFixtures.endpoint(1)), "the endpoint is not printed")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices
                 WHERE app_id = 'news' AND platform = 'web' AND token = \(WebPushFixtures.endpoint(1)) AND user_id = '42'
                   AND tags = ARRAY['sports', 'eu'] AND web_p256dh IS NOT NULL AND web_auth IS NOT NULL
                """) == 1)

            // The platform follows from --subscription; stdin works; --json names the origin.
            let stdin = try await CLIProcess.run(
                ["devices", "add", "--app", "news", "--subscription", "-", "--json", "--database-url", db.urlString],
                stdin: Data(WebPushFixtures.subscription(2).utf8))
            #expect(stdin.status == 0, "\(stdin)")
            let object = try #require(try stdin.json() as? [String: Any])
            #expect(object["platform"] as? String == "web")
            #expect(object["origin"] as? String == "https://updates.push.services.mozilla.com")

            // A browser's new subscription replaces its old one.
            let replaced = try await CLIProcess.run(
                ["devices", "add", "--app", "news", "--subscription", "-", "--replaces", WebPushFixtures.endpoint(2),
                 "--database-url", db.urlString],
                stdin: Data(WebPushFixtures.subscription(3).utf8))
            #expect(replaced.status == 0, "\(replaced)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE platform = 'web'") == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(WebPushFixtures.endpoint(2))") == 0)
        }
    }

    @Test("a bad subscription file exits 1 naming the file and the field, never quoting the endpoint or keys")
    func badSubscriptionFiles() async throws {
        try await TestDatabase.with { db in
            let key = try await WebPushFixtures.addWebApp(db)
            defer { try? FileManager.default.removeItem(at: key) }
            let cases: [(contents: String, expected: String)] = [
                ("not json", "is not a Web Push subscription: the subscription is not a JSON object"),
                (#"{"endpoint": "https://push.example.net/secret-path-1", "keys": {"p256dh": "\#(WebPushFixtures.p256dh)"}}"#,
                 "keys.auth is missing"),
                (#"{"endpoint": "http://push.example.net/secret-path-1", "keys": {"p256dh": "\#(WebPushFixtures.p256dh)", "auth": "\#(WebPushFixtures.auth)"}}"#,
                 "endpoint is not an https URL"),
                (WebPushFixtures.subscription(1, p256dh: "BAAA"), "keys.p256dh must be a 65-byte uncompressed P-256 point"),
                (WebPushFixtures.subscription(1, auth: "c2hvcnQ"), "keys.auth must be 16 bytes"),
            ]
            for (contents, expected) in cases {
                let file = try temporaryFile(contents, suffix: ".json")
                defer { try? FileManager.default.removeItem(at: file) }
                let run = try await CLIProcess.run([
                    "devices", "add", "--app", "news", "--subscription", file.path, "--database-url", db.urlString,
                ])
                #expect(run.status == 1, "\(run)")
                #expect(run.stderr.contains("pgpush: \(file.path) is not a Web Push subscription"), "\(run)")
                #expect(run.stderr.contains(expected), "\(run)")
                #expect(!run.stderr.contains("secret-path"), "the endpoint is never quoted: \(run)")
                #expect(!run.stderr.contains(WebPushFixtures.p256dh), "the key is never quoted: \(run)")
            }
            let missing = try await CLIProcess.run([
                "devices", "add", "--app", "news", "--subscription", "/nonexistent/sub.json", "--database-url", db.urlString,
            ])
            #expect(missing.status == 1 && missing.stderr.contains("cannot read /nonexistent/sub.json"), "\(missing)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }

    @Test("usage: web needs --subscription, --subscription needs web, a token platform needs --token (exit 64)")
    func usage() async throws {
        let file = try temporaryFile(WebPushFixtures.subscription(1), suffix: ".json")
        defer { try? FileManager.default.removeItem(at: file) }
        let url = "postgres://nobody@127.0.0.1:1/none"
        for (arguments, expected) in [
            (["--platform", "web"], "give --subscription FILE"),
            (["--platform", "web", "--subscription", file.path, "--token", WebPushFixtures.endpoint(1)], "not both"),
            (["--platform", "ios", "--subscription", file.path], "--subscription is for --platform web"),
            (["--platform", "android"], "give --token"),
        ] {
            let run = try await CLIProcess.run(["devices", "add", "--app", "news", "--database-url", url] + arguments)
            #expect(run.status == 64, "\(arguments): \(run)")
            #expect(run.stderr.contains(expected), "\(arguments): \(run)")
        }
    }

    @Test("the database's refusals: an app without Web Push exits 1, an unknown app 2; a token registers as before")
    func databaseRefusalsAndTokens() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let file = try temporaryFile(WebPushFixtures.subscription(1), suffix: ".json")
            defer { try? FileManager.default.removeItem(at: file) }
            let noWebPush = try await CLIProcess.run([
                "devices", "add", "--app", "news", "--subscription", file.path, "--database-url", db.urlString,
            ])
            #expect(noWebPush.status == 1, "\(noWebPush)")
            #expect(noWebPush.stderr.contains("has no Web Push configured"), "\(noWebPush)")
            let unknown = try await CLIProcess.run([
                "devices", "add", "--app", "nope", "--subscription", file.path, "--database-url", db.urlString,
            ])
            #expect(unknown.status == 2, "\(unknown)")

            let token = try await CLIProcess.run([
                "devices", "add", "--app", "news", "--token", TestTokens.token(1).uppercased(), "--user", "7",
                "--locale", "fr_CA", "--database-url", db.urlString,
            ])
            #expect(token.status == 0, "\(token)")
            #expect(token.stdout.contains("pgpush: registered ios device \(TestTokens.token(1).prefix(8))… for news"), "\(token)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(1)) AND platform = 'ios' AND user_id = '7'
                   AND locale = 'fr-ca'
                """) == 1)
            let badToken = try await CLIProcess.run([
                "devices", "add", "--app", "news", "--token", "xyz", "--database-url", db.urlString,
            ])
            #expect(badToken.status == 1 && badToken.stderr.contains("token"), "\(badToken)")
        }
    }

    @Test("devices import reads Web Push subscriptions from jsonl: bare or with user_id, tags and locale; keys stored")
    func importJSONLines() async throws {
        try await TestDatabase.with { db in
            let key = try await WebPushFixtures.addWebApp(db)
            let lines = [
                WebPushFixtures.subscription(1),
                "",
                #"{"subscription": \#(WebPushFixtures.subscription(2)), "user_id": "42", "tags": ["sports", "eu"], "locale": "fr_CA"}"#,
            ].joined(separator: "\n")
            let file = try temporaryFile(lines, suffix: ".jsonl")
            defer { for url in [key, file] { try? FileManager.default.removeItem(at: url) } }
            let run = try await CLIProcess.run(["devices", "import", file.path, "--app", "news", "--database-url", db.urlString, "--json"])
            #expect(run.status == 0, "\(run)")
            #expect((try run.json() as? [String: Any])?["inserted"] as? NSNumber == 2, "\(run)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE platform = 'web' AND web_p256dh = \(WebPushFixtures.p256dh)
                   AND web_auth = \(WebPushFixtures.auth)
                """) == 2)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE token = \(WebPushFixtures.endpoint(2)) AND user_id = '42'
                   AND tags = ARRAY['sports', 'eu'] AND locale = 'fr-ca'
                """) == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(WebPushFixtures.endpoint(1)) AND user_id IS NULL") == 1)

            // The same lines through stdin with --format, once more: updated, not duplicated.
            let again = try await CLIProcess.run(
                ["devices", "import", "-", "--format", "jsonl", "--app", "news", "--database-url", db.urlString, "--json"],
                stdin: Data(lines.utf8))
            #expect((try again.json() as? [String: Any])?["updated"] as? NSNumber == 2, "\(again)")
        }
    }

    @Test("a bad jsonl line, or an app without Web Push, exits 1 and imports nothing")
    func importJSONLinesRefusals() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("plain")
            let key = try await WebPushFixtures.addWebApp(db)
            let bad = try temporaryFile(
                WebPushFixtures.subscription(1) + "\n" + WebPushFixtures.subscription(2, auth: "c2hvcnQ") + "\n", suffix: ".jsonl")
            let good = try temporaryFile(WebPushFixtures.subscription(1) + "\n", suffix: ".jsonl")
            let unknownKey = try temporaryFile(#"{"subscription": \#(WebPushFixtures.subscription(1)), "user": "42"}"#, suffix: ".jsonl")
            defer { for url in [key, bad, good, unknownKey] { try? FileManager.default.removeItem(at: url) } }

            let badLine = try await CLIProcess.run(["devices", "import", bad.path, "--app", "news", "--database-url", db.urlString])
            #expect(badLine.status == 1, "\(badLine)")
            #expect(badLine.stderr.contains("line 2: not a Web Push subscription: keys.auth must be 16 bytes"), "\(badLine)")
            #expect(!badLine.stderr.contains("test-2"), "the endpoint is never quoted: \(badLine)")
            let unknown = try await CLIProcess.run(["devices", "import", unknownKey.path, "--app", "news", "--database-url", db.urlString])
            #expect(unknown.status == 1 && unknown.stderr.contains("line 1: unknown key \"user\""), "\(unknown)")
            let noWebPush = try await CLIProcess.run(["devices", "import", good.path, "--app", "plain", "--database-url", db.urlString])
            #expect(noWebPush.status == 1, "\(noWebPush)")
            #expect(noWebPush.stderr.contains("app plain has no Web Push configured"), "\(noWebPush)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }

    @Test("devices import refuses web devices, by --platform or by a platform column, and imports nothing")
    func importRefusesWeb() async throws {
        try await TestDatabase.with { db in
            let key = try await WebPushFixtures.addWebApp(db)
            let csv = try temporaryFile("token,platform\n\(TestTokens.token(1)),ios\n\(WebPushFixtures.endpoint(1)),web\n", suffix: ".csv")
            defer { for url in [key, csv] { try? FileManager.default.removeItem(at: url) } }
            let column = try await CLIProcess.run(["devices", "import", csv.path, "--app", "news", "--database-url", db.urlString])
            #expect(column.status == 1, "\(column)")
            #expect(column.stderr.contains("line 3: a web device is a Web Push subscription"), "\(column)")
            #expect(column.stderr.contains("pgpush devices add --platform web --subscription FILE"), "\(column)")
            let option = try await CLIProcess.run(
                ["devices", "import", "-", "--app", "news", "--platform", "web", "--database-url", db.urlString],
                stdin: Data(WebPushFixtures.endpoint(1).utf8))
            #expect(option.status != 0, "\(option)")
            #expect(option.stderr.contains("pgpush devices add --platform web --subscription FILE") || option.status == 64, "\(option)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }
}
