import Foundation
import PGPushDashboard
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The pages in a real browser (headless Chromium), against a real PostgreSQL, each checked against SQL.
/// One database and one read-only dashboard for the whole test, few browser launches.
@Suite(.database, .serialized, .timeLimit(.minutes(2)))
struct DashboardPagesTests {
    @Test func pagesShowWhatTheDatabaseHoldsAndRefuseWrites() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            let configuration = DashboardHarness.configuration { $0.pageSize = 2 }
            try await DashboardHarness.with(configuration, client: db.client, logger: db.logger) { dashboard in
                // The overview: every app, the paused app's reason in red, escaped; nothing from another host.
                let overview = try await Browser.dumpDOM(dashboard.base + "/")
                for app in try await db.strings("SELECT id FROM push.apps ORDER BY id") {
                    #expect(overview.contains(">\(app)</a>"), "overview lists \(app)")
                }
                let paused = try #require(overview.element(id: "paused-apps", tag: "ul"))
                #expect(paused.contains("class=\"paused\"") && paused.contains("news"))
                #expect(paused.contains("BadTopic &lt;script&gt;alert(\"reason\")&lt;/script&gt;"))
                #expect(overview.occurrences(of: "<script") == 1, "only the dashboard's own script element")
                #expect(!overview.contains("http://") && !overview.contains("https://") && !overview.contains("//"),
                        "every link and asset is relative to the dashboard")
                // The live-refresh script ran: its pause button is shown (without JavaScript it stays hidden).
                #expect(overview.contains("<button id=\"live-toggle\" type=\"button\">Pause live updates</button>"))
                let sendsSQL = try await db.scalar(Int64.self, "SELECT count(*) FROM push.deliveries WHERE sent_at > now() - interval '59 minutes'")
                #expect(overview.contains("Sends per minute over the last hour: \(format(sendsSQL)) in all"))

                let head = try await HTTPClient.send("GET", dashboard.base + "/")
                let csp = try #require(head.header("Content-Security-Policy"))
                #expect(csp.contains("default-src 'none'") && csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"))

                // The broadcast's page: 1,500 and 500 delivered, by platform.
                let jobPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(jobs.broadcast)")
                let platforms = try #require(jobPage.element(id: "table-platforms", tag: "table"))
                #expect(platforms.contains("<td>ios</td><td class=\"num\">1,500</td><td class=\"num\">1,500</td>"))
                #expect(platforms.contains("<td>android</td><td class=\"num\">500</td><td class=\"num\">500</td>"))
                let byPlatform = try await dashboard.json("/jobs/\(jobs.broadcast)", table: "platforms")
                for row in try await db.client.query("""
                    SELECT platform, count(*) FILTER (WHERE status = 200) FROM push.deliveries WHERE job_id = \(jobs.broadcast) GROUP BY 1
                    """, logger: db.logger).collect() {
                    let (platform, delivered) = try row.decode((String, Int64).self)
                    let shown = byPlatform.first { $0["platform"] as? String == platform }
                    #expect((shown?["delivered"] as? NSNumber)?.int64Value == delivered, "\(platform) delivered")
                }

                // The failed job: its reasons with counts and hints, as SQL counts them.
                let reasons = try await dashboard.json("/jobs/\(jobs.failed)", table: "reasons")
                let reasonsSQL = try await db.client.query("""
                    SELECT reason, count(*) FROM push.deliveries WHERE job_id = \(jobs.failed) GROUP BY 1 ORDER BY 2 DESC, 1
                    """, logger: db.logger).collect().map { try $0.decode((String, Int64).self) }
                #expect(reasons.map { $0["reason"] as? String } == reasonsSQL.map(\.0))
                #expect(reasons.map { ($0["count"] as? NSNumber)?.int64Value } == reasonsSQL.map(\.1))
                #expect((reasons.first?["hint"] as? String)?.contains("sandbox") == true)

                // The queued job's payload carries <script>: shown as text, collapsed, never run.
                let queuedPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(jobs.queued)")
                let payload = try #require(queuedPage.element(id: "payload", tag: "details"))
                #expect(payload.contains("&lt;script&gt;alert('payload')&lt;/script&gt;"))
                #expect(queuedPage.occurrences(of: "<script") == 1)

                // The jobs list: newest first, two a page by keyset, each with a progress bar.
                let idsSQL = try await db.client.query("SELECT id FROM push.jobs ORDER BY id DESC", logger: db.logger).collect()
                    .map { try $0.decode(Int64.self) }
                let firstPage = try await dashboard.json("/jobs", table: "jobs")
                #expect(firstPage.map { ($0["job"] as? NSNumber)?.int64Value } == idsSQL.prefix(2).map { $0 })
                let secondPage = try await dashboard.json("/jobs?before=\(idsSQL[1])", table: "jobs")
                #expect(secondPage.map { ($0["job"] as? NSNumber)?.int64Value } == idsSQL.dropFirst(2).prefix(2).map { $0 })
                let filtered = try await dashboard.json("/jobs?app=news&state=queued", table: "jobs")
                #expect(filtered.map { ($0["job"] as? NSNumber)?.int64Value } == [jobs.queued])
                let android = try await dashboard.json("/jobs?platform=android", table: "jobs")
                #expect(android.map { ($0["job"] as? NSNumber)?.int64Value } == [jobs.broadcast])
                let jobsPage = try await Browser.dumpDOM(dashboard.base + "/jobs")
                #expect(jobsPage.occurrences(of: "<svg class=\"bar\"") == 2)
                #expect(jobsPage.contains("id=\"older\""))

                // The app page: its pause, failures over 24 h as SQL counts them.
                let appPage = try await Browser.dumpDOM(dashboard.base + "/apps/news")
                #expect(try #require(appPage.element(id: "pause-reason", tag: "span")).contains("&lt;script&gt;"))
                #expect(appPage.occurrences(of: "<script") == 1)
                let failures = try await dashboard.json("/apps/news", table: "failures")
                #expect(failures.reduce(0) { $0 + (($1["count"] as? NSNumber)?.int64Value ?? 0) }
                    == (try await db.scalar(Int64.self, "SELECT count(*) FROM push.deliveries WHERE app_id = 'news' AND status <> 200")))

                // Outcomes, pruned devices, the audit: as SQL has them; tokens shortened everywhere.
                let outcomes = try await dashboard.json("/outcomes", table: "outcomes")
                #expect(outcomes.reduce(0) { $0 + (($1["count"] as? NSNumber)?.int64Value ?? 0) }
                    == (try await db.scalar(Int64.self, "SELECT count(*) FROM push.deliveries")))
                let prunedPage = try await Browser.dumpDOM(dashboard.base + "/pruned")
                let prunedToken = try await db.strings("SELECT token FROM push.pruned_devices").first!
                #expect(!prunedPage.contains(prunedToken) && prunedPage.contains(String(prunedToken.prefix(8)) + "…"))
                let prunedCSV = try await HTTPClient.send("GET", dashboard.base + "/pruned?format=csv&table=recent")
                #expect(prunedCSV.header("Content-Type")?.hasPrefix("text/csv") == true && !prunedCSV.body.contains(prunedToken))
                let audit = try await dashboard.json("/audit", table: "audit")
                #expect(audit.first?["detail"] as? String == "note <b>stale</b>")
                #expect(try await Browser.dumpDOM(dashboard.base + "/audit").contains("note &lt;b&gt;stale&lt;/b&gt;"))

                // Read-only: every POST is refused, and the job stays queued.
                let refused = try await HTTPClient.send("POST", dashboard.base + "/jobs/\(jobs.queued)/cancel")
                #expect(refused.status == 405)
                #expect(try await HTTPClient.send("POST", dashboard.base + "/apps/news/resume").status == 405)
                #expect(try await db.strings("SELECT state FROM push.jobs WHERE id = \(jobs.queued)") == ["queued"])
                #expect(try await HTTPClient.send("GET", dashboard.base + "/jobs/999999").status == 404)

                // The overview changes while the data does: a new batch of sends, an app paused.
                try await db.execute("""
                    INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at, platform)
                    SELECT \(jobs.broadcast), app_id, token, 200, NULL, 1, now(), platform FROM push.devices WHERE app_id = 'mixed' LIMIT 700
                    """)
                try await db.execute("UPDATE push.apps SET paused_reason = 'InvalidProviderToken', paused_at = now() WHERE id = 'mixed'")
                try await Task.sleep(for: .milliseconds(300))
                // Twelve seconds of the page's own time: the script polls (every 5 s) and swaps in the new <main>.
                let changed = try await Browser.dumpDOM(dashboard.base + "/", virtualTimeMilliseconds: 12_000)
                #expect(changed.contains("<main id=\"content\" data-refresh=\"5\" data-updated=\""), "the live refresh replaced the page's content")
                #expect(changed.contains("Sends per minute over the last hour: \(format(sendsSQL + 700)) in all"))
                #expect(try #require(changed.element(id: "paused-apps", tag: "ul")).contains("InvalidProviderToken"))
            }
        }
    }

    /// Opens beside deliveries: the broadcast's page shows each platform's opens and open rate as
    /// push.opens and push.deliveries count them, read by the dashboard's own login; a job nobody opened shows
    /// nothing extra.
    @Test func jobPageShowsOpensBesideDeliveries() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            // What the apps report: 450 of the 1,500 iOS devices and 31 of the 500 Android ones opened the broadcast.
            try await db.execute("""
                SELECT push.record_open('mixed', token, job_id => \(jobs.broadcast), opened_at => now() - interval '1 minute')
                  FROM (SELECT token FROM push.devices WHERE app_id = 'mixed' AND platform = 'ios' ORDER BY token LIMIT 450) AS d
                """)
            try await db.execute("""
                SELECT push.record_open('mixed', token, job_id => \(jobs.broadcast))
                  FROM (SELECT token FROM push.devices WHERE app_id = 'mixed' AND platform = 'android' ORDER BY token LIMIT 31) AS d
                """)
            #expect(try await db.scalar(Int64.self, "SELECT count(*) FROM push.opens WHERE job_id = \(jobs.broadcast)") == 481)

            // The dashboard's own login, in the read-only group the migrations make.
            let login = try await db.createLogin(memberOf: "pgpush_dashboard")
            var url = db.url
            url.username = login
            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: db.logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }

                // The store: push.job_engagement's rows, as push.opens and push.deliveries count them.
                let store = DashboardStore(client: client, logger: db.logger)
                let broadcast = try #require(try await store.read { try await $0.job(jobs.broadcast) })
                #expect(broadcast.opened == 481)
                for row in try await db.client.query("""
                    SELECT d.platform, count(*) FILTER (WHERE d.status = 200), count(o.token)
                      FROM push.deliveries d LEFT JOIN push.opens o ON o.job_id = d.job_id AND o.token = d.token
                     WHERE d.job_id = \(jobs.broadcast) GROUP BY 1
                    """, logger: db.logger).collect() {
                    let (platform, delivered, opened) = try row.decode((String, Int64, Int64).self)
                    let shown = try #require(broadcast.engagement[platform], "\(platform)")
                    #expect(shown.delivered == delivered && shown.opened == opened, "\(platform)")
                    #expect(shown.openRate == (Double(opened) / Double(delivered) * 10_000).rounded() / 10_000, "\(platform)")
                }
                #expect(try await store.read { try await $0.job(jobs.failed) }?.engagement.isEmpty == true,
                        "a job with no delivery and no open has no engagement row")

                try await DashboardHarness.with(DashboardHarness.configuration(), client: client, logger: db.logger) { dashboard in
                    // The page: opened and open rate beside delivered, failed and pruned, per platform.
                    let jobPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(jobs.broadcast)")
                    let platforms = try #require(jobPage.element(id: "table-platforms", tag: "table"))
                    #expect(platforms.contains("<th class=\"num\">pruned</th><th class=\"num\">opened</th><th class=\"num\">open rate</th>"))
                    #expect(platforms.contains(
                        "<td>ios</td><td class=\"num\">1,500</td><td class=\"num\">1,500</td><td class=\"num\">0</td><td class=\"num\">0</td>"
                            + "<td class=\"num\">450</td><td class=\"num\">30.0 %</td>"))
                    #expect(platforms.contains(
                        "<td>android</td><td class=\"num\">500</td><td class=\"num\">500</td><td class=\"num\">0</td><td class=\"num\">0</td>"
                            + "<td class=\"num\">31</td><td class=\"num\">6.2 %</td>"))
                    // The export: the counts, and the rate as the fraction the view gives.
                    let byPlatform = try await dashboard.json("/jobs/\(jobs.broadcast)", table: "platforms")
                    #expect(byPlatform.map { $0["platform"] as? String } == ["ios", "android", "web"])
                    #expect(byPlatform.map { ($0["opened"] as? NSNumber)?.int64Value } == [450, 31, 0])
                    #expect(byPlatform.map { ($0["open rate"] as? NSNumber)?.doubleValue } == [0.3, 0.062, nil])

                    // A job nobody opened: the platforms table as it always was.
                    let queuedPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(jobs.queued)")
                    let queuedPlatforms = try #require(queuedPage.element(id: "table-platforms", tag: "table"))
                    #expect(!queuedPlatforms.contains("opened") && !queuedPlatforms.contains("open rate"))
                    #expect(try await dashboard.json("/jobs/\(jobs.queued)", table: "platforms").allSatisfy { $0["opened"] == nil })

                    // An open of a job that delivered nothing (its device since pruned): counted, no rate to give.
                    let failedToken = try await db.strings("SELECT token FROM push.pruned_devices WHERE job_id = \(jobs.failed)").first!
                    try await db.execute("SELECT push.record_open('news', \(failedToken), job_id => \(jobs.failed))")
                    let failedPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(jobs.failed)")
                    let failedPlatforms = try #require(failedPage.element(id: "table-platforms", tag: "table"))
                    #expect(failedPlatforms.contains("<td>ios</td><td class=\"num\">3</td><td class=\"num\">0</td><td class=\"num\">3</td><td class=\"num\">1</td>"
                        + "<td class=\"num\">1</td><td class=\"num\">—</td>"))
                    let failedRows = try await dashboard.json("/jobs/\(jobs.failed)", table: "platforms")
                    #expect(failedRows.first?["open rate"] is NSNull)
                }
            }
        }
    }

    private func format(_ n: Int64) -> String {
        let digits = String(n)
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(ch)
        }
        return out
    }
}
