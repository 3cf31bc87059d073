import Foundation
import PGPushTestSupport
import Testing

@Suite("pgpush channels", .timeLimit(.minutes(3)), .database)
struct ChannelsCommandTests {
    @Test("create, list --json, delete; refusals exit 1, an unknown channel exits 2, --wait without a worker times out")
    func createListDeleteAndRefusals() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            try await db.exec("INSERT INTO push.apps (id, topic, certificate_path) VALUES ('legacy', 'com.example.legacy', 'l.p12')")
            let created = try await CLIProcess.run([
                "channels", "create", "news", "match-77", "--storage-policy", "1", "--database-url", db.urlString,
            ])
            #expect(created.status == 0, "\(created)")
            #expect(created.stdout.contains("a worker makes it on APNs"), "\(created)")

            let list = try await CLIProcess.run(["channels", "list", "news", "--json", "--database-url", db.urlString])
            #expect(list.status == 0, "\(list)")
            let channels = try #require(try list.json() as? [[String: Any]])
            #expect(channels.count == 1)
            #expect(channels.first?["name"] as? String == "match-77" && channels.first?["state"] as? String == "creating")
            #expect(channels.first?["storage_policy"] as? NSNumber == 1 && channels.first?["channel_id"] is NSNull)

            // No worker makes it: --wait gives up with timeout(1)'s status.
            let waited = try await CLIProcess.run([
                "channels", "create", "news", "match-77", "--storage-policy", "1", "--wait", "--timeout", "1", "--database-url", db.urlString,
            ])
            #expect(waited.status == 124, "\(waited)")

            let certificateOnly = try await CLIProcess.run(["channels", "create", "legacy", "x", "--database-url", db.urlString])
            #expect(certificateOnly.status == 1, "\(certificateOnly)")
            #expect(certificateOnly.stderr.contains("token authentication"), "\(certificateOnly)")
            let otherPolicy = try await CLIProcess.run([
                "channels", "create", "news", "match-77", "--storage-policy", "0", "--database-url", db.urlString,
            ])
            #expect(otherPolicy.status == 1 && otherPolicy.stderr.contains("storage_policy"), "\(otherPolicy)")
            let badPolicy = try await CLIProcess.run(["channels", "create", "news", "y", "--storage-policy", "2", "--database-url", db.urlString])
            #expect(badPolicy.status == 64, "\(badPolicy)")

            let deleted = try await CLIProcess.run(["channels", "delete", "news", "match-77", "--database-url", db.urlString])
            #expect(deleted.status == 0, "\(deleted)")
            #expect(try await db.scalar("SELECT count(*) FROM push.channels WHERE state = 'deleting'") == 1)
            let unknown = try await CLIProcess.run(["channels", "delete", "news", "nope", "--database-url", db.urlString])
            #expect(unknown.status == 2, "\(unknown)")
            #expect(unknown.stderr.contains("has no channel"), "\(unknown)")
        }
    }
}
