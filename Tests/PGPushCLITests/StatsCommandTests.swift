import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush stats", .timeLimit(.minutes(3)), .database)
struct StatsCommandTests {
    /// Two apps, outcomes today and ten days ago, one due job with a pending audience and one finished job.
    static func seed(_ db: TestDatabase) async throws -> (due: Int64, finished: Int64) {
        try await db.createApp("news")
        try await db.createApp("shop")
        let due = try await db.scalar("""
            SELECT push.enqueue('news', '{"aps":{"alert":"a"}}'::jsonb, tokens => ARRAY[\(TestTokens.token(1)), \(TestTokens.token(2))])
            """)
        let finished = try await db.scalar("SELECT push.enqueue('shop', '{\"aps\":{\"alert\":\"b\"}}'::jsonb, tokens => ARRAY[\(TestTokens.token(3))])")
        try await db.exec("UPDATE push.jobs SET state = 'done', total = 1, delivered = 1, finished_at = now() WHERE id = \(finished)")
        try await db.exec("""
            INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at)
            SELECT \(due), 'news', 't' || g, 200, NULL, 1, now() FROM generate_series(1, 5) g
            UNION ALL SELECT \(due), 'news', 'u' || g, 410, 'Unregistered', 1, now() FROM generate_series(1, 2) g
            UNION ALL SELECT \(finished), 'shop', 'v', 200, NULL, 1, now()
            UNION ALL SELECT \(due), 'news', 'w', 400, 'BadDeviceToken', 1, now() - interval '10 days'
            """)
        return (due, finished)
    }

    @Test("--json: deliveries grouped by day/app/status/reason since the default 7 days, backlog and recent jobs")
    func statsJSON() async throws {
        try await TestDatabase.with { db in
            let (due, finished) = try await Self.seed(db)
            let run = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--json"])
            #expect(run.status == 0, "\(run)")
            let object = try #require(try run.json() as? [String: Any])
            let deliveries = try #require(object["deliveries"] as? [[String: Any]])
            func count(_ app: String, _ status: Int, _ reason: String?) -> Int? {
                deliveries.first {
                    $0["app_id"] as? String == app && ($0["status"] as? NSNumber)?.intValue == status
                        && ($0["reason"] as? String) == reason
                }.flatMap { ($0["count"] as? NSNumber)?.intValue }
            }
            #expect(deliveries.count == 3, "the 10-day-old outcome is outside the default window: \(deliveries)")
            #expect(count("news", 200, nil) == 5)
            #expect(count("news", 410, "Unregistered") == 2)
            #expect(count("shop", 200, nil) == 1)
            #expect(deliveries.first?["reason"] is NSNull || deliveries.contains { $0["reason"] is NSNull })

            let backlog = try #require(object["backlog"] as? [[String: Any]])
            #expect(backlog.count == 1)
            #expect(backlog.first?["app_id"] as? String == "news")
            #expect(backlog.first?["backlog_tokens"] as? NSNumber == 2)

            let jobs = try #require(object["jobs"] as? [[String: Any]])
            #expect(jobs.compactMap { ($0["job_id"] as? NSNumber)?.int64Value } == [finished, due])
            #expect(jobs.first?["state"] as? String == "done")
            #expect(jobs.first?["delivered"] as? NSNumber == 1)
            #expect(jobs.last?["pending"] as? NSNumber == 2)
        }
    }

    @Test("--app and --since filter; the text form is aligned tables")
    func statsFiltersAndText() async throws {
        try await TestDatabase.with { db in
            let (due, _) = try await Self.seed(db)
            let shop = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--app", "shop", "--json"])
            #expect(shop.status == 0, "\(shop)")
            let shopObject = try #require(try shop.json() as? [String: Any])
            #expect((shopObject["deliveries"] as? [[String: Any]])?.count == 1)
            #expect((shopObject["backlog"] as? [Any])?.isEmpty == true)
            #expect((shopObject["jobs"] as? [[String: Any]])?.allSatisfy { $0["app_id"] as? String == "shop" } == true)

            let month = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--app", "news", "--since", "30d", "--json"])
            let monthDeliveries = try #require((try month.json() as? [String: Any])?["deliveries"] as? [[String: Any]])
            #expect(monthDeliveries.count == 3, "\(monthDeliveries)")
            #expect(monthDeliveries.contains { $0["reason"] as? String == "BadDeviceToken" })
            #expect(monthDeliveries.allSatisfy { $0["platform"] as? String == "ios" }, "\(monthDeliveries)")

            let text = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--since", "24h"])
            #expect(text.status == 0, "\(text)")
            let lines = text.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            let header = try #require(lines.firstIndex { $0.hasPrefix("DAY") })
            // Right-aligned numbers: every row of the outcome table ends at the same column.
            let rows = lines[header...].prefix { !$0.isEmpty }
            #expect(rows.count == 5, "\(text.stdout)")
            #expect(Set(rows.map(\.count)).count == 1, "\(text.stdout)")
            #expect(rows.contains { $0.contains("Unregistered") && $0.hasSuffix(" 2") })
            #expect(text.stdout.contains("Queue backlog"))
            #expect(lines.contains { $0.hasPrefix("news") && $0.contains(" 2 ") }, "backlog row: \(text.stdout)")
            #expect(lines.contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("\(due)  news  queued") }, "\(text.stdout)")
        }
    }

    @Test("an unknown app exits 2; a bad --since exits 64")
    func statsErrors() async throws {
        try await TestDatabase.with { db in
            let unknown = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--app", "nope"])
            #expect(unknown.status == 2, "\(unknown)")
            #expect(unknown.stderr.contains("pgpush: unknown app nope"))
            let badSince = try await CLIProcess.run(["stats", "--database-url", db.urlString, "--since", "yesterday"])
            #expect(badSince.status == 64, "\(badSince)")
        }
    }
}
