import Foundation
@testable import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Every ```sql block of the README runs, in order, against the real schema, with some data to report on.
@Suite(.timeLimit(.minutes(2)))
struct ReadmeSQLTests {
    static func readmeSQLBlocks() throws -> [String] {
        let readme = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        var blocks: [String] = []
        var current: [Substring]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line.trimmingCharacters(in: .whitespaces) == "```sql" {
                current = []
            } else if current != nil, line.trimmingCharacters(in: .whitespaces) == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    @Test func theReadmeHasTheCookbookQueries() throws {
        let sql = try Self.readmeSQLBlocks().joined(separator: "\n")
        for needle in ["push.enqueue", "push.register_device", "delivery_rate_pct", "push.delivery_stats", "push.pruned_devices", "push.job_latency", "push.queue_backlog", "android_pending"] {
            #expect(sql.contains(needle), "README SQL lacks \(needle)")
        }
    }

    @Test(.database) func everyReadmeQueryRunsAgainstTheSchema() async throws {
        let blocks = try Self.readmeSQLBlocks()
        #expect(blocks.count >= 2)
        try await TestDatabase.with { db in
            var executed = 0
            for block in blocks {
                for statement in SQLScript.statements(block) {
                    do {
                        _ = try await db.exec(PostgresQuery(unsafeSQL: statement))
                        executed += 1
                    } catch {
                        Issue.record("README statement failed: \(serverMessage(of: error) ?? "\(error)")\n\(statement)")
                    }
                }
                if block.contains("push.create_channel") {
                    // What a worker does next: APNs made the channel.
                    try await db.exec("""
                        UPDATE push.channels SET state = 'active', channel_id = 'dGhlLWNoYW5uZWw=', active_at = now()
                         WHERE state = 'creating'
                        """)
                }
                if executed > 0 && block.contains("INSERT INTO push.apps") {
                    // Outcomes for the reporting queries to read, as a worker would write them.
                    try await db.exec("""
                        INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at)
                        SELECT j.id, j.app_id, lpad(to_hex(g), 64, '0'), CASE WHEN g % 5 = 0 THEN 410 ELSE 200 END,
                               CASE WHEN g % 5 = 0 THEN 'Unregistered' END, gen_random_uuid(), 1, now()
                          FROM push.jobs j, generate_series(1, 20) g
                        """)
                    try await db.exec("UPDATE push.jobs SET state = 'done', delivered = 16, failed = 4, total = 20, first_sent_at = now(), finished_at = now()")
                    try await db.exec("INSERT INTO push.pruned_devices (app_id, token, reason, job_id) VALUES ('news', 'dead', 'Unregistered', 1)")
                }
            }
            #expect(executed >= 15)
            let rate = try await db.rows("""
                SELECT round(100.0 * delivered / nullif(delivered + failed, 0), 2)::float8 FROM push.job_progress WHERE job_id = (SELECT min(job_id) FROM push.job_progress)
                """)
            for try await value in rate.decode(Double.self) {
                #expect(value == 80)
            }
        }
    }
}
