import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush enqueue: broadcast controls", .timeLimit(.minutes(3)), .database)
struct EnqueueBroadcastControlsTests {
    @Test("--max-rate, --category and --ignore-quiet-hours, then --spread-over, --local-time and --respect-quiet-hours reach their columns")
    func flagsReachTheColumns() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let throttled = try await CLIProcess.run([
                "enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "New episode", "--max-rate", "500",
                "--category", "marketing", "--ignore-quiet-hours", "--json",
            ])
            #expect(throttled.status == 0, "\(throttled)")
            let first = try #require(((try throttled.json() as? [String: Any])?["job_id"] as? NSNumber)?.int64Value)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(first) AND max_rate = 500 AND spread_over IS NULL
                   AND local_time IS NULL AND category = 'marketing' AND respect_quiet_hours = false AND paced
                """) == 1)

            let local = try await CLIProcess.run([
                "enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "Digest", "--spread-over", "30 minutes",
                "--local-time", "09:00", "--respect-quiet-hours", "--priority", "10",
            ])
            #expect(local.status == 0, "\(local)")
            let second = try #require(Int64(local.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(local)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(second) AND max_rate IS NULL
                   AND spread_over = interval '30 minutes' AND local_time = '09:00'::time AND category IS NULL
                   AND respect_quiet_hours = true AND priority = 10 AND paced
                """) == 1)

            // Neither flag: the trigger's default (below priority 10, respected), and an unpaced job.
            let plain = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "Hi"])
            let third = try #require(Int64(plain.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(plain)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(third) AND respect_quiet_hours AND NOT paced AND max_rate IS NULL
                """) == 1)
        }
    }

    @Test("a job file takes max_rate, spread_over, local_time, respect_quiet_hours and category; a non-boolean is refused")
    func jobFile() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let file = try temporaryFile("""
                {"app_id": "news", "payload": {"aps": {"alert": "Sale"}}, "local_time": "18:30",
                 "respect_quiet_hours": false, "category": "promo", "max_rate": 40}
                """, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: file) }
            let run = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", file.path])
            #expect(run.status == 0, "\(run)")
            let jobID = try #require(Int64(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(run)")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(jobID) AND local_time = '18:30'::time
                   AND respect_quiet_hours = false AND category = 'promo' AND max_rate = 40
                """) == 1)

            let numeric = try temporaryFile(#"{"app_id": "news", "payload": {"aps": {}}, "respect_quiet_hours": 1}"#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: numeric) }
            let refused = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", numeric.path])
            #expect(refused.status == 1, "\(refused)")
            #expect(refused.stderr.contains("respect_quiet_hours must be true or false"), "\(refused)")

            let spread = try temporaryFile(#"{"app_id": "news", "payload": {"aps": {}}, "spread_over": "1 hour"}"#, suffix: ".json")
            defer { try? FileManager.default.removeItem(at: spread) }
            let spreadRun = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", spread.path])
            #expect(spreadRun.status == 0, "\(spreadRun)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE spread_over = interval '1 hour'") == 1)
        }
    }

    @Test("usage errors exit 64 before the database: both rates, a malformed local time, both quiet-hours flags, --file with a flag")
    func usageErrors() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let base = ["enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "x"]
            let both = try await CLIProcess.run(base + ["--max-rate", "10", "--spread-over", "1 hour"])
            #expect(both.status == 64, "\(both)")
            #expect(both.stderr.contains("--max-rate or --spread-over, not both"), "\(both)")
            let badTime = try await CLIProcess.run(base + ["--local-time", "9am"])
            #expect(badTime.status == 64, "\(badTime)")
            #expect(badTime.stderr.contains("--local-time must be a time of day as HH:MM"), "\(badTime)")
            let quiet = try await CLIProcess.run(base + ["--respect-quiet-hours", "--ignore-quiet-hours"])
            #expect(quiet.status == 64, "\(quiet)")
            let file = try await CLIProcess.run(["enqueue", "--database-url", db.urlString, "--file", "job.json", "--category", "x"])
            #expect(file.status == 64, "\(file)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    @Test("the database's refusals reach the user as it wrote them, naming the field; nothing is queued")
    func databaseRefusals() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let base = ["enqueue", "--database-url", db.urlString, "--app", "news", "--alert", "x"]
            let zero = try await CLIProcess.run(base + ["--max-rate", "0"])
            #expect(zero.status == 1, "\(zero)")
            #expect(zero.stderr.contains("pgpush: max_rate 0 must be a positive number of notifications per second"), "\(zero)")
            let long = try await CLIProcess.run(base + ["--spread-over", "40 days"])
            #expect(long.status == 1, "\(long)")
            #expect(long.stderr.contains("must be longer than zero and at most 31 days"), "\(long)")
            let notInterval = try await CLIProcess.run(base + ["--spread-over", "soon"])
            #expect(notInterval.status == 1, "\(notInterval)")
            #expect(notInterval.stderr.contains("spread_over soon is not an interval"), "\(notInterval)")
            let category = try await CLIProcess.run(base + ["--category", "no spaces"])
            #expect(category.status == 1, "\(category)")
            #expect(category.stderr.contains("category 'no spaces' must be 1 to 64 letters"), "\(category)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }
}
