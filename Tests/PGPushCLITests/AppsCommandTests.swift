import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush apps", .timeLimit(.minutes(3)), .database)
struct AppsCommandTests {
    @Test("add (token and certificate auth) then list --json: paths and names only, never file contents")
    func addAndList() async throws {
        try await TestDatabase.with { db in
            let key = try temporaryFile("-----BEGIN PRIVATE KEY-----\nSECRETKEYMATERIAL\n-----END PRIVATE KEY-----\n", suffix: ".p8")
            defer { try? FileManager.default.removeItem(at: key) }
            let token = try await CLIProcess.run([
                "apps", "add", "news", "--database-url", db.urlString, "--topic", "com.example.news",
                "--team-id", "ABCDE12345", "--key-id", "KEY1234567", "--key-file", key.path, "--rate-limit", "250",
            ])
            #expect(token.status == 0, "\(token)")
            #expect(!token.stderr.contains("warning"), "the key file is readable: \(token)")

            // The workers may live elsewhere: a missing file only warns.
            let certificate = try await CLIProcess.run([
                "apps", "add", "legacy", "--database-url", db.urlString, "--topic", "com.example.legacy",
                "--environment", "sandbox", "--certificate", "/nonexistent/legacy.p12",
                "--certificate-password-env", "LEGACY_P12_PASSWORD",
            ])
            #expect(certificate.status == 0, "\(certificate)")
            #expect(certificate.stderr.contains("warning: /nonexistent/legacy.p12 is not readable"), "\(certificate)")

            let list = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString, "--json"])
            #expect(list.status == 0, "\(list)")
            #expect(!list.stdout.contains("SECRETKEYMATERIAL"))
            let apps = try #require(try list.json() as? [[String: Any]])
            #expect(apps.map { $0["app_id"] as? String } == ["legacy", "news"])
            let news = try #require(apps.last)
            #expect(news["auth"] as? String == "token")
            #expect(news["topic"] as? String == "com.example.news")
            #expect(news["environment"] as? String == "production")
            #expect(news["team_id"] as? String == "ABCDE12345")
            #expect(news["key_id"] as? String == "KEY1234567")
            #expect(news["private_key_path"] as? String == key.path)
            #expect(news["rate_limit"] as? NSNumber == 250)
            #expect(news["paused_reason"] is NSNull)
            let legacy = try #require(apps.first)
            #expect(legacy["auth"] as? String == "certificate")
            #expect(legacy["environment"] as? String == "sandbox")
            #expect(legacy["certificate_path"] as? String == "/nonexistent/legacy.p12")
            #expect(legacy["certificate_password_env"] as? String == "LEGACY_P12_PASSWORD")
            #expect(try await db.scalar("SELECT count(*) FROM push.apps WHERE private_key_path = \(key.path) AND rate_limit = 250") == 1)
        }
    }

    @Test("add refusals: a duplicate or --require-files with a missing file exit 1, mixed credentials exit 64")
    func addRefusals() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let duplicate = try await CLIProcess.run([
                "apps", "add", "news", "--database-url", db.urlString, "--topic", "t", "--certificate", "/etc/hostname",
            ])
            #expect(duplicate.status == 1, "\(duplicate)")
            #expect(duplicate.stderr.contains("pgpush: app news already exists"), "\(duplicate)")
            let strict = try await CLIProcess.run([
                "apps", "add", "other", "--database-url", db.urlString, "--topic", "t", "--certificate", "/nonexistent/c.p12",
                "--require-files",
            ])
            #expect(strict.status == 1, "\(strict)")
            let badTeam = try await CLIProcess.run([
                "apps", "add", "other", "--database-url", db.urlString, "--topic", "t", "--team-id", "short",
                "--key-id", "KEY1234567", "--key-file", "/etc/hostname",
            ])
            #expect(badTeam.status == 1, "\(badTeam)")
            #expect(badTeam.stderr.contains("apps_team_id_format"), "the server's message names the constraint: \(badTeam)")
            let mixed = try await CLIProcess.run([
                "apps", "add", "other", "--database-url", db.urlString, "--topic", "t", "--certificate", "/etc/hostname",
                "--key-file", "/etc/hostname",
            ])
            #expect(mixed.status == 64, "\(mixed)")
            let relative = try await CLIProcess.run([
                "apps", "add", "other", "--database-url", db.urlString, "--topic", "t", "--certificate", "cert.p12",
            ])
            #expect(relative.status == 64, "\(relative)")
            #expect(try await db.scalar("SELECT count(*) FROM push.apps") == 1)
        }
    }

    @Test("add with FCM credentials, beside APNs or alone; list shows them; half an FCM credential exits 64")
    func addWithFCM() async throws {
        try await TestDatabase.with { db in
            let account = try temporaryFile(#"{"type":"service_account","private_key":"SECRETRSAKEY"}"#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: account) }
            let dual = try await CLIProcess.run([
                "apps", "add", "news", "--database-url", db.urlString, "--topic", "com.example.news",
                "--team-id", "ABCDE12345", "--key-id", "KEY1234567", "--key-file", "/etc/hostname",
                "--fcm-project-id", "news-7f3a", "--fcm-service-account", account.path,
            ])
            #expect(dual.status == 0, "\(dual)")
            #expect(dual.stdout.contains("FCM project news-7f3a"), "\(dual)")
            let android = try await CLIProcess.run([
                "apps", "add", "news-android", "--database-url", db.urlString,
                "--fcm-project-id", "news-7f3a", "--fcm-service-account", account.path,
            ])
            #expect(android.status == 0, "\(android)")

            let list = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString, "--json"])
            #expect(list.status == 0, "\(list)")
            #expect(!list.stdout.contains("SECRETRSAKEY"))
            let apps = try #require(try list.json() as? [[String: Any]])
            let byID = Dictionary(uniqueKeysWithValues: apps.compactMap { app in (app["app_id"] as? String).map { ($0, app) } })
            #expect(byID["news"]?["fcm_project_id"] as? String == "news-7f3a")
            #expect(byID["news"]?["auth"] as? String == "token")
            #expect(byID["news-android"]?["topic"] is NSNull)
            #expect(byID["news-android"]?["auth"] is NSNull)
            #expect(byID["news-android"]?["fcm_service_account_path"] as? String == account.path)
            let table = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString])
            #expect(table.status == 0 && table.stdout.contains("news-7f3a"), "\(table)")

            for arguments in [
                ["--fcm-project-id", "p-1"],
                ["--fcm-service-account", account.path],
                ["--fcm-project-id", "p-1", "--fcm-service-account", "relative.json"],
                ["--team-id", "ABCDE12345", "--key-id", "KEY1234567", "--key-file", "/etc/hostname"],
                [],
            ] {
                let refused = try await CLIProcess.run(["apps", "add", "other", "--database-url", db.urlString] + arguments)
                #expect(refused.status == 64, "\(arguments): \(refused)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.apps") == 2)
        }
    }

    @Test("pause sets the reason and time, list shows it, resume clears both; unknown apps exit 2")
    func pauseAndResume() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            try await db.createApp("shop")
            let pause = try await CLIProcess.run(["apps", "pause", "news", "--database-url", db.urlString, "--reason", "key rotation"])
            #expect(pause.status == 0, "\(pause)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.apps WHERE id = 'news' AND paused_reason = 'key rotation' AND paused_at IS NOT NULL
                """) == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 1)

            let list = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString])
            #expect(list.status == 0, "\(list)")
            let newsLine = try #require(list.stdout.split(separator: "\n").first { $0.hasPrefix("news ") })
            #expect(newsLine.contains("paused: key rotation"))
            let shopLine = try #require(list.stdout.split(separator: "\n").first { $0.hasPrefix("shop ") })
            #expect(shopLine.contains("active"))

            let resume = try await CLIProcess.run(["apps", "resume", "news", "--database-url", db.urlString])
            #expect(resume.status == 0, "\(resume)")
            #expect(resume.stdout.contains("resumed news"))
            #expect(try await db.scalar("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL OR paused_at IS NOT NULL") == 0)
            let again = try await CLIProcess.run(["apps", "resume", "news", "--database-url", db.urlString])
            #expect(again.status == 0 && again.stdout.contains("was not paused"), "\(again)")

            for command in [["pause", "nope"], ["resume", "nope"]] {
                let unknown = try await CLIProcess.run(["apps"] + command + ["--database-url", db.urlString])
                #expect(unknown.status == 2, "\(unknown)")
                #expect(unknown.stderr.contains("pgpush: unknown app nope"), "\(unknown)")
            }
        }
    }

    @Test("grant and revoke: a granted login sees only its apps; unknown role or app exits 2 and names it")
    func grantAndRevoke() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            try await db.exec(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            try await db.exec(#"SELECT push.enqueue('b', '{"aps":{}}')"#)
            let user = try await db.createLogin(memberOf: "pgpush_producer")
            let grant = try await CLIProcess.run(["apps", "grant", user, "a", "--database-url", db.urlString])
            #expect(grant.status == 0 && grant.stdout.contains("\(user) may use a"), "\(grant)")
            #expect(try await db.scalar("SELECT count(*) FROM push.app_grants WHERE role_name = \(user) AND app_id = 'a'") == 1)
            let stats = try await CLIProcess.run(["stats", "--database-url", db.urlString(user: user), "--json"])
            #expect(stats.status == 0, "\(stats)")
            #expect(stats.stdout.contains("\"a\"") && !stats.stdout.contains("\"b\""), "\(stats)")

            let unknownRole = try await CLIProcess.run(["apps", "grant", "nobody_here", "a", "--database-url", db.urlString])
            #expect(unknownRole.status == 2 && unknownRole.stderr.contains("unknown role nobody_here"), "\(unknownRole)")
            let unknownApp = try await CLIProcess.run(["apps", "grant", user, "zz", "--database-url", db.urlString])
            #expect(unknownApp.status == 2 && unknownApp.stderr.contains("unknown app zz"), "\(unknownApp)")

            let revoke = try await CLIProcess.run(["apps", "revoke", user, "a", "--database-url", db.urlString])
            #expect(revoke.status == 0 && revoke.stdout.contains("no grants left"), "\(revoke)")
            #expect(try await db.scalar("SELECT count(*) FROM push.app_grants") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.operator_audit WHERE action IN ('grant_app', 'revoke_app')") == 2)
        }
    }
}

