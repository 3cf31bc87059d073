import Crypto
import Foundation
import PGPushTestSupport
import Testing

/// `pgpush apps vapid-key`, `apps add --vapid-key --vapid-subject`, `apps set-vapid`, and Web Push in `apps list`
/// and `apps resume`.
@Suite("pgpush apps: Web Push", .timeLimit(.minutes(3)), .database)
struct WebPushAppsCommandTests {
    @Test("vapid-key --generate writes a 0600 PKCS#8 key and prints its public key; never overwrites; FILE shows the key")
    func generateKey() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-vapid-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("news-vapid.pem").path

        let generated = try await CLIProcess.run(["apps", "vapid-key", "--generate", file, "--json"])
        #expect(generated.status == 0, "\(generated)")
        let object = try #require(try generated.json() as? [String: Any])
        let publicKey = try #require(object["application_server_key"] as? String)
        #expect(object["file"] as? String == file)
        let pem = try String(contentsOfFile: file, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(!generated.stdout.contains("PRIVATE KEY"), "the private key is never printed")
        let key = try P256.Signing.PrivateKey(pemRepresentation: pem)
        #expect(WebPushFixtures.base64URL(key.publicKey.x963Representation) == publicKey)
        #expect(publicKey.count == 87, "65 bytes in base64url without padding")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? NSNumber)
        #expect(mode.intValue & 0o777 == 0o600)

        let again = try await CLIProcess.run(["apps", "vapid-key", "--generate", file])
        #expect(again.status == 1, "\(again)")
        #expect(again.stderr.contains("cannot create \(file): it exists"), "\(again)")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == pem, "the existing key is untouched")

        let shown = try await CLIProcess.run(["apps", "vapid-key", file])
        #expect(shown.status == 0, "\(shown)")
        #expect(shown.stdout.contains("applicationServerKey (for the website's pushManager.subscribe): \(publicKey)"), "\(shown)")

        let missingDirectory = try await CLIProcess.run(["apps", "vapid-key", "--generate", directory.path + "/no/such/dir/k.pem"])
        #expect(missingDirectory.status == 1, "\(missingDirectory)")
        #expect(missingDirectory.stderr.contains("cannot create"), "\(missingDirectory)")
        let neither = try await CLIProcess.run(["apps", "vapid-key"])
        #expect(neither.status == 64, "\(neither)")
        let both = try await CLIProcess.run(["apps", "vapid-key", "--generate", file + ".new", file])
        #expect(both.status == 64, "\(both)")
    }

    @Test("add --vapid-key --vapid-subject: a Web-only app; the public key is derived from the file; list shows it")
    func addWebPushApp() async throws {
        try await TestDatabase.with { db in
            let key = try WebPushFixtures.keyFile()
            defer { try? FileManager.default.removeItem(at: key.url) }
            let add = try await CLIProcess.run([
                "apps", "add", "news-web", "--database-url", db.urlString, "--vapid-key", key.url.path,
                "--vapid-subject", "mailto:ops@example.com",
            ])
            #expect(add.status == 0, "\(add)")
            #expect(add.stdout.contains("pgpush: added app news-web (Web Push as mailto:ops@example.com)"), "\(add)")
            #expect(add.stdout.contains(key.applicationServerKey), "the website needs the public key: \(add)")

            let list = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString, "--json"])
            #expect(list.status == 0, "\(list)")
            #expect(!list.stdout.contains("PRIVATE KEY"))
            let app = try #require((try list.json() as? [[String: Any]])?.first)
            #expect(app["vapid_private_key_path"] as? String == key.url.path)
            #expect(app["vapid_public_key"] as? String == key.applicationServerKey)
            #expect(app["vapid_subject"] as? String == "mailto:ops@example.com")
            #expect(app["web_push_paused_reason"] is NSNull)
            #expect(app["topic"] is NSNull)
            #expect(app["fcm_project_id"] is NSNull)
            let table = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString])
            #expect(table.status == 0 && table.stdout.contains("WEB PUSH") && table.stdout.contains("mailto:ops@example.com"), "\(table)")

            // Beside APNs.
            let both = try await CLIProcess.run([
                "apps", "add", "news", "--database-url", db.urlString, "--topic", "com.example.news",
                "--team-id", "ABCDE12345", "--key-id", "KEY1234567", "--key-file", "/etc/hostname",
                "--vapid-key", key.url.path, "--vapid-subject", "https://example.com/contact",
            ])
            #expect(both.status == 0, "\(both)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.apps WHERE id = 'news' AND topic = 'com.example.news'
                   AND vapid_public_key = \(key.applicationServerKey) AND vapid_subject = 'https://example.com/contact'
                """) == 1)
        }
    }

    @Test("add refusals: half the pair and a bad subject exit 64; an unreadable or non-P-256 key file exits 1")
    func addRefusals() async throws {
        try await TestDatabase.with { db in
            let key = try WebPushFixtures.keyFile()
            let p384 = try temporaryFile(P384.Signing.PrivateKey().pemRepresentation, suffix: ".pem")
            let garbage = try temporaryFile("not a key at all", suffix: ".pem")
            defer { for url in [key.url, p384, garbage] { try? FileManager.default.removeItem(at: url) } }
            func add(_ arguments: [String]) async throws -> CLIResult {
                try await CLIProcess.run(["apps", "add", "web", "--database-url", db.urlString] + arguments)
            }

            let keyOnly = try await add(["--vapid-key", key.url.path])
            #expect(keyOnly.status == 64, "\(keyOnly)")
            #expect(keyOnly.stderr.contains("give both --vapid-key and --vapid-subject"), "\(keyOnly)")
            let subjectOnly = try await add(["--vapid-subject", "mailto:ops@example.com"])
            #expect(subjectOnly.status == 64, "\(subjectOnly)")
            #expect(subjectOnly.stderr.contains("give both --vapid-key and --vapid-subject"), "\(subjectOnly)")

            let spaced = try await add(["--vapid-key", key.url.path, "--vapid-subject", "mailto: ops@example.com"])
            #expect(spaced.status == 64, "\(spaced)")
            #expect(spaced.stderr.contains("whitespace"), "Apple's rule, named: \(spaced)")
            let localhost = try await add(["--vapid-key", key.url.path, "--vapid-subject", "mailto:ops@localhost"])
            #expect(localhost.status == 64 && localhost.stderr.contains("localhost"), "\(localhost)")
            let relative = try await add(["--vapid-key", "vapid.pem", "--vapid-subject", "mailto:ops@example.com"])
            #expect(relative.status == 64 && relative.stderr.contains("must be absolute"), "\(relative)")

            let missing = try await add(["--vapid-key", "/nonexistent/vapid.pem", "--vapid-subject", "mailto:ops@example.com"])
            #expect(missing.status == 1, "\(missing)")
            #expect(missing.stderr.contains("the VAPID key file /nonexistent/vapid.pem cannot be read"), "\(missing)")
            #expect(missing.stderr.contains("pgpush apps vapid-key --generate"), "the way out is named: \(missing)")
            for file in [p384, garbage] {
                let wrong = try await add(["--vapid-key", file.path, "--vapid-subject", "mailto:ops@example.com"])
                #expect(wrong.status == 1, "\(wrong)")
                #expect(wrong.stderr.contains("does not hold a PEM-encoded P-256 private key"), "\(wrong)")
                #expect(!wrong.stderr.contains("not a key at all"), "the file's contents are never quoted")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.apps") == 0)
        }
    }

    @Test("set-vapid gives an existing app Web Push, warns when the key changes; unknown app exits 2")
    func setVAPID() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let first = try WebPushFixtures.keyFile()
            let second = try WebPushFixtures.keyFile()
            defer { for url in [first.url, second.url] { try? FileManager.default.removeItem(at: url) } }
            func set(_ app: String, _ key: URL) async throws -> CLIResult {
                try await CLIProcess.run([
                    "apps", "set-vapid", app, "--database-url", db.urlString, "--vapid-key", key.path,
                    "--vapid-subject", "mailto:ops@example.com",
                ])
            }
            let set1 = try await set("news", first.url)
            #expect(set1.status == 0, "\(set1)")
            #expect(set1.stdout.contains(first.applicationServerKey), "\(set1)")
            #expect(!set1.stderr.contains("warning"), "no earlier key: \(set1)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.apps WHERE id = 'news' AND vapid_public_key = \(first.applicationServerKey)
                   AND vapid_private_key_path = \(first.url.path) AND topic = 'com.example.app'
                """) == 1)

            try await db.exec("UPDATE push.apps SET web_push_paused_reason = 'web.push.apple.com answered 403 BadJwtToken'")
            let set2 = try await set("news", second.url)
            #expect(set2.status == 0, "\(set2)")
            #expect(set2.stderr.contains("must subscribe again"), "\(set2)")
            #expect(set2.stderr.contains("Web Push is still paused"), "\(set2)")
            #expect(try await db.scalar("SELECT count(*) FROM push.apps WHERE vapid_public_key = \(second.applicationServerKey)") == 1)

            let unknown = try await set("nope", first.url)
            #expect(unknown.status == 2, "\(unknown)")
            let half = try await CLIProcess.run(["apps", "set-vapid", "news", "--database-url", db.urlString, "--vapid-key", first.url.path])
            #expect(half.status == 64, "\(half)")
        }
    }

    @Test("a paused Web Push shows in list; resume clears it, and says what it resumed")
    func pausedWebPush() async throws {
        try await TestDatabase.with { db in
            let key = try await WebPushFixtures.addWebApp(db)
            defer { try? FileManager.default.removeItem(at: key) }
            try await db.exec("UPDATE push.apps SET web_push_paused_reason = 'VAPID key refused (403 BadJwtToken)' WHERE id = 'news'")

            let list = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString, "--json"])
            let app = try #require((try list.json() as? [[String: Any]])?.first)
            #expect(app["web_push_paused_reason"] as? String == "VAPID key refused (403 BadJwtToken)")
            #expect(app["paused_reason"] is NSNull)
            let table = try await CLIProcess.run(["apps", "list", "--database-url", db.urlString])
            #expect(table.stdout.contains("Web Push paused: VAPID key refused (403 BadJwtToken)"), "\(table)")

            let resume = try await CLIProcess.run(["apps", "resume", "news", "--database-url", db.urlString])
            #expect(resume.status == 0, "\(resume)")
            #expect(resume.stdout.contains("pgpush: resumed news's Web Push"), "\(resume)")
            #expect(try await db.scalar("SELECT count(*) FROM push.apps WHERE web_push_paused_reason IS NULL") == 1)

            try await db.exec("UPDATE push.apps SET web_push_paused_reason = 'refused', paused_reason = 'operator', paused_at = now()")
            let both = try await CLIProcess.run(["apps", "resume", "news", "--database-url", db.urlString])
            #expect(both.stdout.contains("pgpush: resumed news and its Web Push"), "\(both)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.apps WHERE web_push_paused_reason IS NULL AND paused_reason IS NULL
                """) == 1)
            let again = try await CLIProcess.run(["apps", "resume", "news", "--database-url", db.urlString])
            #expect(again.stdout.contains("pgpush: news was not paused"), "\(again)")
        }
    }
}
