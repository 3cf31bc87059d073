import Foundation
import PGPushTestSupport
import Testing

/// `pgpush enqueue --web --web-urgency` (and a job file's `web`, `web_urgency`), and the Web Push counts of
/// `watch`, `jobs` and `stats`.
@Suite("pgpush enqueue and watch: Web Push", .timeLimit(.minutes(3)), .database)
struct WebPushEnqueueCommandTests {
    /// RFC 8291's example application server key: a valid P-256 public key for an app's `vapid_public_key`.
    static let vapidPublicKey = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"

    /// App "news" with APNs and Web Push, and "news-web" with Web Push only; the key path need not exist, as
    /// nothing is sent.
    static func createApp(_ db: TestDatabase) async throws {
        try await db.createApp("news")
        try await db.exec("""
            UPDATE push.apps SET vapid_private_key_path = '/nonexistent/vapid.pem', vapid_public_key = \(vapidPublicKey),
                   vapid_subject = 'mailto:ops@example.com'
             WHERE id = 'news'
            """)
        try await db.exec("""
            INSERT INTO push.apps (id, environment, vapid_private_key_path, vapid_public_key, vapid_subject)
            VALUES ('news-web', 'production', '/nonexistent/vapid.pem', \(vapidPublicKey), 'mailto:ops@example.com')
            """)
    }

    @Test("--web and --web-urgency reach push.enqueue; a Web-only job needs no APNs payload")
    func enqueueWeb() async throws {
        try await TestDatabase.with { db in
            try await Self.createApp(db)
            let both = try await CLIProcess.run([
                "enqueue", "--app", "news", "--alert", "Goal!", "--web", #"{"title": "Goal!", "body": "2-1"}"#,
                "--web-urgency", "high", "--json", "--database-url", db.urlString,
            ])
            #expect(both.status == 0, "\(both)")
            let job = try #require((try both.json() as? [String: Any])?["job_id"] as? NSNumber).int64Value
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(job) AND web = '{"title": "Goal!", "body": "2-1"}'::jsonb
                   AND web_urgency = 'high' AND payload -> 'aps' ->> 'alert' = 'Goal!'
                """) == 1)

            let webFile = try temporaryFile(#"{"web_push": 8030, "notification": {"title": "Hi", "navigate": "https://example.com/"}}"#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: webFile) }
            let webOnly = try await CLIProcess.run([
                "enqueue", "--app", "news-web", "--web-file", webFile.path, "--web-urgency", "very-low", "--database-url", db.urlString,
            ])
            #expect(webOnly.status == 0, "\(webOnly)")
            let webJob = try #require(Int64(webOnly.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(webOnly)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(webJob) AND web ->> 'web_push' = '8030' AND web_urgency = 'very-low'
                """) == 1)

            // An app with APNs needs its payload too: its iOS devices are in the audience.
            let apnsWithoutPayload = try await CLIProcess.run([
                "enqueue", "--app", "news", "--web", "{}", "--database-url", db.urlString,
            ])
            #expect(apnsWithoutPayload.status == 1, "\(apnsWithoutPayload)")
            #expect(apnsWithoutPayload.stderr.contains("payload"), "\(apnsWithoutPayload)")
        }
    }

    @Test("bad --web input: invalid JSON exits 1 naming web; a bad urgency or both --web and --web-file exit 64")
    func enqueueWebRefusals() async throws {
        try await TestDatabase.with { db in
            try await Self.createApp(db)
            func enqueue(_ arguments: [String]) async throws -> CLIResult {
                try await CLIProcess.run(["enqueue", "--app", "news", "--database-url", db.urlString] + arguments)
            }
            let malformed = try await enqueue(["--web", "{oops"])
            #expect(malformed.status == 1, "\(malformed)")
            #expect(malformed.stderr.contains("web is not valid JSON"), "\(malformed)")
            let urgency = try await enqueue(["--web", "{}", "--web-urgency", "urgent"])
            #expect(urgency.status == 64, "\(urgency)")
            #expect(urgency.stderr.contains("very-low"), "the choices are listed: \(urgency)")
            let twice = try await enqueue(["--web", "{}", "--web-file", "/dev/null"])
            #expect(twice.status == 64 && twice.stderr.contains("give --web or --web-file, not both"), "\(twice)")
            let stdinTwice = try await enqueue(["--web-file", "-", "--payload-file", "-"])
            #expect(stdinTwice.status == 64 && stdinTwice.stderr.contains("--web-file"), "\(stdinTwice)")
            let nothing = try await enqueue(["--web-urgency", "high"])
            #expect(nothing.status == 64 && nothing.stderr.contains("--web"), "\(nothing)")
            // Too large for one 4096-byte record: the database refuses it and names the field.
            let large = try await enqueue(["--alert", "hi", "--web", #"{"body": "\#(String(repeating: "x", count: 5000))"}"#])
            #expect(large.status == 1, "\(large)")
            #expect(large.stderr.contains("web"), "\(large)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    @Test("a job file's web (object or string) and web_urgency; a bad web_urgency exits 1")
    func jobFile() async throws {
        try await TestDatabase.with { db in
            try await Self.createApp(db)
            let good = try temporaryFile(#"{"app_id": "news-web", "web": {"title": "Hi"}, "web_urgency": "low"}"#, suffix: ".json")
            let bad = try temporaryFile(#"{"app_id": "news", "web": "{\"title\": \"Hi\"}", "web_urgency": "soon"}"#, suffix: ".json")
            defer { for url in [good, bad] { try? FileManager.default.removeItem(at: url) } }
            let run = try await CLIProcess.run(["enqueue", "--file", good.path, "--database-url", db.urlString])
            #expect(run.status == 0, "\(run)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE web = '{\"title\": \"Hi\"}'::jsonb AND web_urgency = 'low'") == 1)
            let refused = try await CLIProcess.run(["enqueue", "--file", bad.path, "--database-url", db.urlString])
            #expect(refused.status == 1, "\(refused)")
            #expect(refused.stderr.contains("web_urgency must be one of very-low, low, normal, high: soon"), "\(refused)")
            let mixed = try await CLIProcess.run(["enqueue", "--file", good.path, "--web-urgency", "high", "--database-url", db.urlString])
            #expect(mixed.status == 64, "\(mixed)")
        }
    }

    @Test("watch splits delivered by platform for a job to iOS and Web; --json has the per-platform counts")
    func watchSplitsByPlatform() async throws {
        try await TestDatabase.with { db in
            try await Self.createApp(db)
            let job = try await db.scalar("SELECT push.enqueue('news', '{\"aps\":{\"alert\":\"hi\"}}'::jsonb, web => '{\"title\":\"hi\"}'::jsonb)")
            try await db.exec("""
                UPDATE push.jobs SET state = 'done', total = 5, web_total = 2, delivered = 4, web_delivered = 2, failed = 1,
                       android_total = 0, started_at = now(), finished_at = now()
                 WHERE id = \(job)
                """)
            let watch = try await CLIProcess.run(["watch", String(job), "--database-url", db.urlString, "--timeout", "30"])
            #expect(watch.status == 0, "\(watch)")
            #expect(watch.stdout.contains("delivered 4 (iOS 2, Web 2)"), "\(watch)")
            #expect(watch.stdout.contains("job \(job) done: 4 delivered (iOS 2, Web 2), 1 failed"), "\(watch)")

            let json = try await CLIProcess.run(["watch", String(job), "--database-url", db.urlString, "--json"])
            let line = try #require(try json.jsonLines().last)
            #expect(line["web_delivered"] as? NSNumber == 2)
            #expect(line["ios_delivered"] as? NSNumber == 2)
            #expect(line["android_delivered"] as? NSNumber == 0)

            // jobs and stats show the same split, in their BY PLATFORM column and their JSON.
            let jobs = try await CLIProcess.run(["jobs", "--database-url", db.urlString])
            #expect(jobs.status == 0 && jobs.stdout.contains("BY PLATFORM") && jobs.stdout.contains("iOS 2, Web 2"), "\(jobs)")
            let stats = try await CLIProcess.run(["stats", "--database-url", db.urlString])
            #expect(stats.status == 0 && stats.stdout.contains("iOS 2, Web 2"), "\(stats)")
            let jobsJSON = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--json"])
            let row = try #require((try jobsJSON.json() as? [[String: Any]])?.first)
            #expect(row["web_delivered"] as? NSNumber == 2 && row["ios_delivered"] as? NSNumber == 2, "\(jobsJSON)")
        }
    }

    @Test("a job to one platform shows no split; stats lists web outcomes")
    func singlePlatformAndStats() async throws {
        try await TestDatabase.with { db in
            try await Self.createApp(db)
            let job = try await db.scalar("SELECT push.enqueue('news', '{\"aps\":{\"alert\":\"hi\"}}'::jsonb)")
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 3, delivered = 3, android_total = 0 WHERE id = \(job)")
            let watch = try await CLIProcess.run(["watch", String(job), "--database-url", db.urlString])
            #expect(watch.status == 0, "\(watch)")
            #expect(watch.stdout.contains("job \(job) done: 3 delivered, 0 failed"), "\(watch)")
            #expect(!watch.stdout.contains("iOS"), "\(watch)")

            let stats = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--json"])
            #expect(stats.status == 0, "\(stats)")
            let jobs = try #require((try stats.json() as? [String: Any])?["jobs"] as? [[String: Any]])
            #expect(jobs.first?["web_delivered"] as? NSNumber == 0)
        }
    }
}
