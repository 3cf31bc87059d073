import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush watch: broadcast controls", .timeLimit(.minutes(3)), .database)
struct WatchBroadcastControlsTests {
    /// A local-time job running as a worker leaves it: 2 delivered, 3 capped, a throttle of 50/s, and two zones'
    /// chunks still to come (Asia/Tokyo in an hour with 4 tokens, Europe/Paris in two with 1).
    static func pacedJob(_ db: TestDatabase) async throws -> Int64 {
        try await db.createApp("news")
        let jobID = try await db.scalar("""
            SELECT push.enqueue('news', '{"aps":{"alert":"hi"}}'::jsonb, local_time => '09:00', category => 'marketing')
            """)
        try await db.exec("""
            UPDATE push.jobs SET state = 'running', started_at = now(), total = 10, delivered = 2, capped = 3, throttle = 50
             WHERE id = \(jobID)
            """)
        try await db.exec("""
            INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, lo_token, hi_token, estimated_tokens, next_attempt_at, zone)
            VALUES (\(jobID), 'news', 0, 1, 'range', '', NULL, 4, now() + interval '1 hour', 'Asia/Tokyo'),
                   (\(jobID), 'news', 0, 2, 'range', '', NULL, 1, now() + interval '2 hours', 'Europe/Paris')
            """)
        return jobID
    }

    @Test("the line shows capped, the throttle, the estimated finish and the waiting zones soonest first; the summary counts capped")
    func linesAndSummary() async throws {
        try await TestDatabase.with { db in
            let jobID = try await Self.pacedJob(db)
            let child = try CLIProcess(["watch", String(jobID), "--database-url", db.urlString, "--interval", "0.1", "--timeout", "30"])
            try await eventually { child.stdoutSoFar.contains("waiting") }
            try await db.exec("DELETE FROM push.chunks WHERE job_id = \(jobID)")
            try await db.exec("UPDATE push.jobs SET state = 'done', delivered = 7, finished_at = now() WHERE id = \(jobID)")
            let run = try await child.finish(timeout: .seconds(40))
            #expect(run.status == 0, "\(run)")
            let line = try #require(run.stdout.split(separator: "\n").first { $0.contains("waiting") }.map(String.init), "\(run)")
            #expect(line.contains("capped 3"), "\(line)")
            #expect(line.contains("throttle 50/s"), "\(line)")
            #expect(line.contains("finish ~"), "\(line)")
            #expect(line.contains("waiting 5 in 2 zones: Asia/Tokyo "), "\(line)")
            let tokyo = try #require(line.range(of: "Asia/Tokyo"))
            let paris = try #require(line.range(of: "Europe/Paris"))
            #expect(tokyo.lowerBound < paris.lowerBound, "soonest first: \(line)")
            let summary = try #require(run.stdout.split(separator: "\n").last)
            #expect(summary == "job \(jobID) done: 7 delivered, 0 failed, 3 capped, 0 pruned, 0 pending (total 10)", "\(run)")
        }
    }

    @Test("--json has capped, throttle, estimated_finish_at, waiting_tokens and every waiting zone with its moment")
    func json() async throws {
        try await TestDatabase.with { db in
            let jobID = try await Self.pacedJob(db)
            let run = try await CLIProcess.run(["watch", String(jobID), "--database-url", db.urlString, "--json", "--timeout", "0.5", "--interval", "0.2"])
            #expect(run.status == 124, "\(run)")
            let first = try #require(try run.jsonLines().first)
            #expect(first["capped"] as? NSNumber == 3)
            #expect(first["throttle"] as? NSNumber == 50)
            #expect(first["waiting_tokens"] as? NSNumber == 5)
            #expect(first["estimated_finish_at"] is String)
            let zones = try #require(first["waiting_zones"] as? [[String: Any]])
            #expect(zones.map { $0["zone"] as? String } == ["Asia/Tokyo", "Europe/Paris"])
            #expect(zones.allSatisfy { ($0["moment"] as? String)?.hasSuffix("Z") == true })
        }
    }

    @Test("pgpush jobs and stats count capped apart from failed, in their tables and their JSON")
    func jobsListsCapped() async throws {
        try await TestDatabase.with { db in
            let jobID = try await Self.pacedJob(db)
            let json = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--json"])
            #expect(json.status == 0, "\(json)")
            let row = try #require((try json.json() as? [[String: Any]])?.first { ($0["job_id"] as? NSNumber)?.int64Value == jobID })
            #expect(row["capped"] as? NSNumber == 3)
            #expect(row["failed"] as? NSNumber == 0)
            let table = try await CLIProcess.run(["jobs", "--database-url", db.urlString])
            let lines = table.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first?.contains("CAPPED") == true, "\(table)")
            let stats = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--json"])
            let recent = try #require((try stats.json() as? [String: Any])?["jobs"] as? [[String: Any]], "\(stats)")
            #expect(recent.first { ($0["job_id"] as? NSNumber)?.int64Value == jobID }?["capped"] as? NSNumber == 3, "\(stats)")
        }
    }
}
