import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush watch", .timeLimit(.minutes(3)), .database)
struct WatchCommandTests {
    /// Queues a job for three explicit tokens and returns its id.
    static func enqueueJob(_ db: TestDatabase) async throws -> Int64 {
        try await db.createApp("news")
        return try await db.scalar("""
            SELECT push.enqueue('news', '{"aps":{"alert":"hi"}}'::jsonb,
                                tokens => ARRAY[\(TestTokens.token(1)), \(TestTokens.token(2)), \(TestTokens.token(3))])
            """)
    }

    @Test("follows a job through running to done: plain lines, then the summary with the final counts; exit 0")
    func watchUntilDone() async throws {
        try await TestDatabase.with { db in
            let jobID = try await Self.enqueueJob(db)
            let child = try CLIProcess(["watch", String(jobID), "--database-url", db.urlString, "--interval", "0.1", "--timeout", "30"])
            try await eventually { child.stdoutSoFar.contains("queued") }
            try await db.exec("UPDATE push.jobs SET state = 'running', total = 3, delivered = 1, started_at = now() WHERE id = \(jobID)")
            try await eventually { child.stdoutSoFar.contains("running") }
            try await db.exec("UPDATE push.jobs SET state = 'done', delivered = 2, failed = 1, pruned = 1 WHERE id = \(jobID)")
            let run = try await child.finish(timeout: .seconds(40))
            #expect(run.status == 0, "\(run)")
            // Not a terminal: plain lines, no carriage-return rewriting.
            #expect(!run.stdout.contains("\r"))
            #expect(run.stdout.contains("job \(jobID) running"))
            #expect(run.stdout.contains("delivered 1"))
            let summary = try #require(run.stdout.split(separator: "\n").last)
            #expect(summary == "job \(jobID) done: 2 delivered, 1 failed, 1 pruned, 0 pending (total 3)")
        }
    }

    @Test("--json prints one object per poll with the job's counts")
    func watchJSONLines() async throws {
        try await TestDatabase.with { db in
            let jobID = try await Self.enqueueJob(db)
            let child = try CLIProcess(["watch", String(jobID), "--database-url", db.urlString, "--interval", "0.1", "--timeout", "30", "--json"])
            try await eventually { child.stdoutSoFar.split(separator: "\n").count >= 2 }
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 3, delivered = 3 WHERE id = \(jobID)")
            let run = try await child.finish(timeout: .seconds(40))
            #expect(run.status == 0, "\(run)")
            let lines = try run.jsonLines()
            #expect(lines.count >= 3)
            let first = try #require(lines.first)
            #expect(first["state"] as? String == "queued")
            #expect(first["pending"] as? NSNumber == 3)
            #expect(first["total"] as? NSNumber == 3)
            #expect(first["app_id"] as? String == "news")
            let last = try #require(lines.last)
            #expect(last["state"] as? String == "done")
            #expect(last["delivered"] as? NSNumber == 3)
            #expect(last["pending"] as? NSNumber == 0)
            #expect(lines.allSatisfy { ($0["job_id"] as? NSNumber)?.int64Value == jobID })
        }
    }

    @Test("a failed job exits 1, a cancelled one 3")
    func failedAndCancelled() async throws {
        try await TestDatabase.with { db in
            let failedJob = try await Self.enqueueJob(db)
            try await db.exec("UPDATE push.jobs SET state = 'failed', total = 3, failed = 3 WHERE id = \(failedJob)")
            let failed = try await CLIProcess.run(["watch", String(failedJob), "--database-url", db.urlString, "--timeout", "30"])
            #expect(failed.status == 1, "\(failed)")
            #expect(failed.stderr.contains("pgpush: job \(failedJob) failed"), "\(failed)")
            #expect(failed.stdout.contains("0 delivered, 3 failed"), "\(failed)")

            let cancelledJob = try await db.scalar("SELECT push.enqueue('news', '{\"aps\":{}}'::jsonb, tokens => ARRAY[\(TestTokens.token(9))])")
            try await db.exec("SELECT push.cancel(\(cancelledJob))")
            let cancelled = try await CLIProcess.run(["watch", String(cancelledJob), "--database-url", db.urlString, "--timeout", "30", "--json"])
            #expect(cancelled.status == 3, "\(cancelled)")
            #expect(try cancelled.jsonLines().last?["state"] as? String == "cancelled")
        }
    }

    @Test("an unknown job exits 2; a job that does not end within --timeout exits 124")
    func unknownJobAndTimeout() async throws {
        try await TestDatabase.with { db in
            let unknown = try await CLIProcess.run(["watch", "424242", "--database-url", db.urlString, "--timeout", "30"])
            #expect(unknown.status == 2, "\(unknown)")
            #expect(unknown.stderr.contains("pgpush: unknown job 424242"), "\(unknown)")

            let jobID = try await Self.enqueueJob(db)
            let started = ContinuousClock.now
            let stuck = try await CLIProcess.run(["watch", String(jobID), "--database-url", db.urlString, "--interval", "0.2", "--timeout", "1"])
            #expect(stuck.status == 124, "\(stuck)")
            #expect(stuck.stderr.contains("timed out"), "\(stuck)")
            #expect(ContinuousClock.now - started < .seconds(20))

            let badInterval = try await CLIProcess.run(["watch", String(jobID), "--database-url", db.urlString, "--interval", "0"])
            #expect(badInterval.status == 64, "\(badInterval)")
        }
    }
}
