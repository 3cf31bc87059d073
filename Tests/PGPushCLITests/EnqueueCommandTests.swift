import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush enqueue", .timeLimit(.minutes(3)), .database)
struct EnqueueCommandTests {
    @Test("--alert with tokens and --ttl: the job row holds exactly what was asked, --json prints its id")
    func enqueueAlertToTokens() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let upper = TestTokens.token(2).uppercased()
            let run = try await CLIProcess.run([
                "enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "Tab\there \"quoted\"",
                "--token", upper, "--token", TestTokens.token(1), "--ttl", "3600", "--collapse-id", "c-1",
                "--priority", "7", "--json",
            ])
            #expect(run.status == 0, "\(run)")
            let object = try #require(try run.json() as? [String: Any])
            let jobID = try #require((object["job_id"] as? NSNumber)?.int64Value)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(jobID)") == 1)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE id = \(jobID) AND app_id = 'news' AND payload = jsonb_build_object('aps', jsonb_build_object('alert', E'Tab\\there "quoted"'))
                   AND tokens = ARRAY[\(TestTokens.token(1)), \(TestTokens.token(2))]
                   AND collapse_id = 'c-1' AND priority = 7 AND push_type = 'alert' AND apns_priority = 10
                   AND expires_at - send_at BETWEEN interval '3599 seconds' AND interval '3601 seconds'
                """) == 1)
        }
    }

    @Test("plain output is just the job id; --payload-file and repeated --user")
    func enqueuePayloadFile() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let file = try temporaryFile(#"{"aps":{"alert":{"title":"T","body":"B"}},"deep":"link"}"#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try await CLIProcess.run([
                "enqueue", "--database-url", db.urlString, "--app", "news", "--payload-file", file.path,
                "--user", "u1", "--user", "u2", "--send-at", "2035-01-02T03:04:05Z",
            ])
            #expect(run.status == 0, "\(run)")
            let jobID = try #require(Int64(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(run)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(jobID) AND payload ->> 'deep' = 'link'
                   AND payload #>> '{aps,alert,title}' = 'T' AND user_ids = ARRAY['u1', 'u2']
                   AND send_at = '2035-01-02T03:04:05Z'::timestamptz AND expires_at IS NULL
                """) == 1)
        }
    }

    @Test("--file takes push.enqueue's parameter names; the idempotency key returns the same job")
    func enqueueJobFile() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let file = try temporaryFile("""
                {"app_id": "news", "payload": {"aps": {"content-available": 1}}, "push_type": "background",
                 "apns_priority": 5, "tags": ["sports", "eu"], "expires_at": "2035-06-01T00:00:00Z",
                 "idempotency_key": "daily-42", "priority": -1}
                """, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: file) }
            let first = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", file.path, "--json"])
            let second = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", file.path, "--json"])
            #expect(first.status == 0 && second.status == 0, "\(first)\n\(second)")
            let firstID = try #require((try first.json() as? [String: Any])?["job_id"] as? NSNumber)
            let secondID = try #require((try second.json() as? [String: Any])?["job_id"] as? NSNumber)
            #expect(firstID == secondID)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE push_type = 'background' AND apns_priority = 5
                   AND tags = ARRAY['sports', 'eu'] AND priority = -1 AND idempotency_key = 'daily-42'
                   AND expires_at = '2035-06-01T00:00:00Z'::timestamptz
                """) == 1)
        }
    }

    @Test("a payload the database rejects: exit 1 with the server's message, nothing queued")
    func rejectedPayload() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let noAPS = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--app", "news", "--payload", #"{"x":1}"#])
            #expect(noAPS.status == 1, "\(noAPS)")
            #expect(noAPS.stderr.contains(#"pgpush: payload has no "aps" dictionary"#), "\(noAPS)")
            let notJSON = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--app", "news", "--payload", "{x"])
            #expect(notJSON.status == 1, "\(notJSON)")
            #expect(notJSON.stderr.contains("pgpush: invalid input syntax for type json"), "\(notJSON)")
            let badPriority = try await CLIProcess.run([
                "enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "x", "--apns-priority", "7",
            ])
            #expect(badPriority.status == 1, "\(badPriority)")
            #expect(badPriority.stderr.contains("apns_priority 7 is not valid"), "\(badPriority)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    @Test("unknown app exits 2; usage errors exit 64")
    func unknownAppAndUsage() async throws {
        try await TestDatabase.with { db in
            let unknown = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--app", "nope", "--alert", "hi"])
            #expect(unknown.status == 2, "\(unknown)")
            #expect(unknown.stderr.contains("unknown app_id: nope"), "\(unknown)")
            let noPayload = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--app", "nope"])
            #expect(noPayload.status == 64, "\(noPayload)")
            let both = try await CLIProcess.run([
                "enqueue", "--database-url", db.urlString, "--app", "a", "--alert", "x", "--ttl", "5",
                "--expires-at", "2035-01-01T00:00:00Z",
            ])
            #expect(both.status == 64, "\(both)")
            let badDate = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--app", "a", "--alert", "x", "--send-at", "tomorrow"])
            #expect(badDate.status == 64, "\(badDate)")
        }
    }

    @Test("--localized and --badge increment: the job keeps the variants under lowercase locales, resolved, and the badge mode")
    func enqueueLocalizedWithBadge() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let run = try await CLIProcess.run([
                "enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "Goal!", "--tag", "sports",
                "--localized", #"{"fr": {"aps": {"alert": "But !"}}, "fr-CA": {"aps": {"alert": "But, là !"}}}"#,
                "--badge", "increment", "--json",
            ])
            #expect(run.status == 0, "\(run)")
            let jobID = try #require(((try run.json() as? [String: Any])?["job_id"] as? NSNumber)?.int64Value, "\(run)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE id = \(jobID) AND badge = 'increment' AND localized IS NOT NULL AND variants IS NOT NULL
                   AND localized ?& ARRAY['fr', 'fr-ca'] AND NOT localized ? 'fr-CA'
                   AND variants #>> '{fr-ca,apns,aps,alert}' = 'But, là !' AND variants #>> '{fr,apns,aps,alert}' = 'But !'
                   AND payload #>> '{aps,alert}' = 'Goal!'
                """) == 1)

            // --localized-file reads the same object from a file (here stdin); a job file takes both keys.
            let fromStdin = try await CLIProcess.run(
                ["enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "Hi", "--localized-file", "-"],
                stdin: Data(#"{"de": {"aps": {"alert": "Hallo"}}}"#.utf8))
            #expect(fromStdin.status == 0, "\(fromStdin)")
            let file = try temporaryFile(#"""
                {"app_id": "news", "payload": {"aps": {"alert": "Hi"}}, "localized": {"es": {"aps": {"alert": "Hola"}}},
                 "badge": "increment"}
                """#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: file) }
            let fromFile = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", file.path])
            #expect(fromFile.status == 0, "\(fromFile)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE (variants #>> '{de,apns,aps,alert}' = 'Hallo' AND badge IS NULL)
                    OR (variants #>> '{es,apns,aps,alert}' = 'Hola' AND badge = 'increment')
                """) == 2)
        }
    }

    @Test("a malformed --localized or --badge: exit 1 naming the field, no job row")
    func rejectedLocalizedAndBadge() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            for (arguments, expected) in [
                (["--localized", #"{"fr": {"aps": "#], "pgpush: localized is not valid JSON"),
                (["--localized", #"["fr"]"#], "pgpush: localized must be a JSON object"),
                (["--localized", #"{"not a locale!": {"aps": {"alert": "x"}}}"#], "pgpush: localized key 'not a locale!' is not a locale"),
                (["--localized", #"{"fr": "Bonjour"}"#], #"pgpush: localized."fr" must be a JSON object"#),
                (["--localized", #"{"fr": {"aps": {"alert": "a"}}, "FR": {"aps": {"alert": "b"}}}"#], "pgpush: localized has two variants"),
                (["--badge", "decrement"], "pgpush: badge 'decrement' is not valid"),
            ] {
                let run = try await CLIProcess.run(
                    ["enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "x"] + arguments)
                #expect(run.status == 1, "\(arguments): \(run)")
                #expect(run.stderr.contains(expected), "\(arguments): \(run)")
            }
            let badFile = try temporaryFile(#"{"app_id": "news", "payload": {"aps": {"alert": "x"}}, "localized": "{oops"}"#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: badFile) }
            let fromFile = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", badFile.path])
            #expect(fromFile.status == 1 && fromFile.stderr.contains("localized is not valid JSON"), "\(fromFile)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)

            for usage in [
                ["--app", "news", "--alert", "x", "--localized", "{}", "--localized-file", "l.json"],
                ["--app", "news", "--payload-file", "-", "--localized-file", "-"],
                ["--file", badFile.path, "--badge", "increment"],
            ] {
                let run = try await CLIProcess.run(["enqueue", "--database-url", db.urlString] + usage)
                #expect(run.status == 64, "\(usage): \(run)")
            }
        }
    }

    @Test("--wait follows the job to its end and prints the final counts")
    func enqueueAndWait() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let child = try CLIProcess([
                "enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "hi",
                "--token", TestTokens.token(1), "--token", TestTokens.token(2), "--token", TestTokens.token(3),
                "--wait", "--interval", "0.1", "--timeout", "30", "--json",
            ])
            // No worker here: play its part once the job exists.
            try await eventually { try await db.scalar("SELECT count(*) FROM push.jobs") == 1 }
            try await db.exec("UPDATE push.jobs SET state = 'running', total = 3, delivered = 1, started_at = now()")
            try await Task.sleep(for: .milliseconds(300))
            try await db.exec("UPDATE push.jobs SET state = 'done', delivered = 2, failed = 1, pruned = 1, finished_at = now()")
            let run = try await child.finish(timeout: .seconds(40))
            #expect(run.status == 0, "\(run)")
            let lines = try run.jsonLines()
            let jobID = try #require(lines.first?["job_id"] as? NSNumber)
            #expect(lines.first?.count == 1, "the first line is {\"job_id\": N}")
            let last = try #require(lines.last)
            #expect(last["job_id"] as? NSNumber == jobID)
            #expect(last["state"] as? String == "done")
            #expect(last["delivered"] as? NSNumber == 2)
            #expect(last["failed"] as? NSNumber == 1)
            #expect(last["pruned"] as? NSNumber == 1)
            #expect(last["pending"] as? NSNumber == 0)
            #expect(last["total"] as? NSNumber == 3)
        }
    }
}
