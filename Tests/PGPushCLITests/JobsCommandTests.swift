import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush jobs", .timeLimit(.minutes(3)), .database)
struct JobsCommandTests {
    /// Jobs of two apps: labelled bf/growth, bf/brand, another campaign, and none.
    static func seed(_ db: TestDatabase) async throws -> (growth: Int64, brand: Int64, other: Int64, plain: Int64, shop: Int64) {
        try await db.createApp("news")
        try await db.createApp("shop")
        func enqueue(_ app: String, _ labels: String?) async throws -> Int64 {
            try await db.scalar("""
                SELECT push.enqueue(\(app)::text, '{"aps":{"alert":"x"}}', tokens => ARRAY[\(TestTokens.token(1)), \(TestTokens.token(2))],
                                    labels => \(labels)::jsonb)
                """)
        }
        let growth = try await enqueue("news", #"{"campaign":"bf","team":"growth"}"#)
        let brand = try await enqueue("news", #"{"campaign":"bf","team":"brand"}"#)
        let other = try await enqueue("news", #"{"campaign":"spring"}"#)
        let plain = try await enqueue("news", nil)
        let shop = try await enqueue("shop", #"{"campaign":"bf","team":"growth"}"#)
        return (growth, brand, other, plain, shop)
    }

    static func ids(_ run: CLIResult) throws -> [Int64] {
        let rows = try #require(try run.json() as? [[String: Any]], "\(run)")
        return rows.compactMap { ($0["job_id"] as? NSNumber)?.int64Value }
    }

    @Test("lists every job newest first with its labels, as an aligned table")
    func listsWithLabels() async throws {
        try await TestDatabase.with { db in
            let seeded = try await Self.seed(db)
            let run = try await CLIProcess.run(["jobs", "--database-url", db.urlString])
            #expect(run.status == 0, "\(run)")
            let lines = run.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first?.hasPrefix("ID") == true, "\(run.stdout)")
            for header in ["APP", "STATE", "TOTAL", "DELIVERED", "FAILED", "PENDING", "LABELS", "CREATED"] {
                #expect(lines.first?.contains(header) == true, "\(header): \(run.stdout)")
            }
            let rows = lines.dropFirst(2).map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(rows.count == 5, "\(run.stdout)")
            let order = rows.compactMap { Int64($0.split(separator: " ").first ?? "") }
            #expect(order == [seeded.shop, seeded.plain, seeded.other, seeded.brand, seeded.growth], "\(run.stdout)")
            let growthRow = try #require(rows.first { $0.hasPrefix("\(seeded.growth) ") })
            #expect(growthRow.contains("news"), "\(growthRow)")
            #expect(growthRow.contains("queued"), "\(growthRow)")
            #expect(growthRow.contains("campaign=bf,team=growth"), "\(growthRow)")
            let plainRow = try #require(rows.first { $0.hasPrefix("\(seeded.plain) ") })
            #expect(!plainRow.contains("="), "\(plainRow)")
        }
    }

    @Test("--label keeps the jobs with that label; two --label flags must both match; --app and --state narrow")
    func labelFilters() async throws {
        try await TestDatabase.with { db in
            let seeded = try await Self.seed(db)
            let bf = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--label", "campaign=bf", "--json"])
            #expect(bf.status == 0, "\(bf)")
            #expect(try Self.ids(bf) == [seeded.shop, seeded.brand, seeded.growth])

            let both = try await CLIProcess.run([
                "jobs", "--database-url", db.urlString, "--label", "campaign=bf", "--label", "team=growth", "--json",
            ])
            #expect(both.status == 0, "\(both)")
            #expect(try Self.ids(both) == [seeded.shop, seeded.growth])

            let newsOnly = try await CLIProcess.run([
                "jobs", "--database-url", db.urlString, "--app", "news", "--label", "campaign=bf", "--label", "team=growth", "--json",
            ])
            #expect(try Self.ids(newsOnly) == [seeded.growth])

            let none = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--label", "campaign=nope"])
            #expect(none.status == 0, "\(none)")
            #expect(none.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "no jobs match", "\(none)")

            try await db.exec("UPDATE push.jobs SET state = 'cancelled', finished_at = now() WHERE id = \(seeded.brand)")
            let cancelled = try await CLIProcess.run([
                "jobs", "--database-url", db.urlString, "--label", "campaign=bf", "--state", "cancelled", "--json",
            ])
            #expect(try Self.ids(cancelled) == [seeded.brand])
            let queued = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--state", "queued", "--limit", "2", "--json"])
            #expect(try Self.ids(queued) == [seeded.shop, seeded.plain])
        }
    }

    @Test("--json: an array of objects with the counts and the labels as an object")
    func jsonShape() async throws {
        try await TestDatabase.with { db in
            let seeded = try await Self.seed(db)
            let run = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--app", "news", "--json"])
            #expect(run.status == 0, "\(run)")
            let rows = try #require(try run.json() as? [[String: Any]], "\(run)")
            #expect(rows.count == 4)
            let growth = try #require(rows.first { ($0["job_id"] as? NSNumber)?.int64Value == seeded.growth })
            #expect(Set(growth.keys) == [
                "job_id", "app_id", "state", "total", "delivered", "failed", "capped", "pending", "labels", "created_at",
                "ios_delivered", "android_delivered", "web_delivered",
            ])
            #expect(growth["web_delivered"] as? NSNumber == 0)
            #expect(growth["app_id"] as? String == "news")
            #expect(growth["state"] as? String == "queued")
            #expect(growth["total"] as? NSNumber == 2)
            #expect(growth["delivered"] as? NSNumber == 0)
            #expect(growth["failed"] as? NSNumber == 0)
            #expect(growth["pending"] as? NSNumber == 2)
            #expect(growth["labels"] as? [String: String] == ["campaign": "bf", "team": "growth"])
            #expect((growth["created_at"] as? String)?.hasSuffix("Z") == true)
            let plain = try #require(rows.first { ($0["job_id"] as? NSNumber)?.int64Value == seeded.plain })
            #expect((plain["labels"] as? [String: String])?.isEmpty == true, "\(plain)")

            // failed counts expired tokens too, as push.job_progress does.
            try await db.exec("UPDATE push.jobs SET state = 'done', failed = 1, expired = 1, finished_at = now() WHERE id = \(seeded.growth)")
            let after = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--label", "team=growth", "--app", "news", "--json"])
            let done = try #require((try after.json() as? [[String: Any]])?.first, "\(after)")
            #expect(done["failed"] as? NSNumber == 2)
            #expect(done["pending"] as? NSNumber == 0)
        }
    }

    @Test("a malformed --label exits 64; an unknown app exits 2")
    func errors() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            for bad in ["campaign", "=bf"] {
                let run = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--label", bad])
                #expect(run.status == 64, "\(bad): \(run)")
                #expect(run.stderr.contains("--label"), "\(bad): \(run)")
                #expect(run.stdout.isEmpty, "\(bad): \(run)")
            }
            let conflicting = try await CLIProcess.run([
                "jobs", "--database-url", db.urlString, "--label", "campaign=a", "--label", "campaign=b",
            ])
            #expect(conflicting.status == 64, "\(conflicting)")
            let badState = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--state", "sleeping"])
            #expect(badState.status == 64, "\(badState)")
            let badLimit = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--limit", "0"])
            #expect(badLimit.status == 64, "\(badLimit)")

            let unknown = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--app", "nope"])
            #expect(unknown.status == 2, "\(unknown)")
            #expect(unknown.stderr.contains("pgpush: unknown app nope"), "\(unknown)")
            #expect(unknown.stdout.isEmpty, "\(unknown)")

            let empty = try await CLIProcess.run(["jobs", "--database-url", db.urlString, "--json"])
            #expect(empty.status == 0, "\(empty)")
            #expect((try empty.json() as? [Any])?.isEmpty == true, "\(empty)")
        }
    }
}
