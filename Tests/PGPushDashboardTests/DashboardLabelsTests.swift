import Foundation
import PGPushDashboard
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Labels on the jobs pages (the `label` filter, badges, the job's links) and "Resend to failed tokens".
@Suite(.database, .serialized, .timeLimit(.minutes(2)))
struct DashboardLabelsTests {
    static let credentials = ("admin", "correct horse")

    struct Labelled: Sendable {
        /// `{"campaign": "black-friday", "team": "growth"}`, done: one token delivered, one 500, one 429.
        let blackFriday: Int64
        /// `{"team": "growth"}`, queued.
        let growth: Int64
        /// `{"campaign": "cyber-monday", "team": "growth"}`, queued.
        let cyber: Int64
    }

    /// iOS devices 1, 2 and 3 of `mixed` (Seed.standard).
    static let tokens = (1...3).map { String(repeating: "0", count: 63) + String($0) }

    static func seed(_ db: TestDatabase) async throws -> Labelled {
        let blackFriday = try await db.scalar(Int64.self, """
            SELECT push.enqueue('mixed', '{"aps":{"alert":"sale"}}'::jsonb, tokens => \(tokens),
                                labels => '{"campaign": "black-friday", "team": "growth"}'::jsonb)
            """)
        try await db.execute("""
            UPDATE push.jobs SET state = 'done', total = 3, delivered = 1, failed = 2, started_at = now() - interval '1 minute',
                   first_sent_at = now() - interval '1 minute', finished_at = now() WHERE id = \(blackFriday)
            """)
        try await db.execute("""
            INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at, platform)
            VALUES (\(blackFriday), 'mixed', \(tokens[0]), 200, NULL, 1, now() - interval '50 seconds', 'ios'),
                   (\(blackFriday), 'mixed', \(tokens[1]), 500, 'InternalServerError', 1, now() - interval '50 seconds', 'ios'),
                   (\(blackFriday), 'mixed', \(tokens[2]), 429, 'TooManyRequests', 1, now() - interval '50 seconds', 'ios')
            """)
        let growth = try await db.scalar(Int64.self, """
            SELECT push.enqueue('mixed', '{"aps":{"alert":"g"}}'::jsonb, tokens => \([tokens[0]]), labels => '{"team": "growth"}'::jsonb)
            """)
        let cyber = try await db.scalar(Int64.self, """
            SELECT push.enqueue('mixed', '{"aps":{"alert":"c"}}'::jsonb, tokens => \([tokens[0]]),
                                labels => '{"campaign": "cyber-monday", "team": "growth"}'::jsonb)
            """)
        return Labelled(blackFriday: blackFriday, growth: growth, cyber: cyber)
    }

    private func ids(_ rows: [[String: Any]]) -> [Int64?] { rows.map { ($0["job"] as? NSNumber)?.int64Value } }

    @Test func theLabelFilterListsOnlyMatchingJobsAndTheJobShowsItsLabels() async throws {
        try await TestDatabase.with { db in
            let standard = try await Seed.standard(db)
            let l = try await Self.seed(db)
            try await DashboardHarness.with(DashboardHarness.configuration(), client: db.client, logger: db.logger) { dashboard in
                // `key:value` and `key=value`; repeated, AND-ed; as `labels @>` finds them.
                #expect(ids(try await dashboard.json("/jobs?label=campaign:black-friday", table: "jobs")) == [l.blackFriday])
                #expect(ids(try await dashboard.json("/jobs?label=team%3Dgrowth", table: "jobs")) == [l.cyber, l.growth, l.blackFriday])
                #expect(ids(try await dashboard.json("/jobs?label=team:growth&label=campaign=cyber-monday", table: "jobs")) == [l.cyber])
                #expect(ids(try await dashboard.json("/jobs?label=campaign:black-friday&label=campaign:cyber-monday", table: "jobs")).isEmpty,
                        "one key with two values: no job carries both")
                #expect(ids(try await dashboard.json("/jobs?label=team:growth&app=news", table: "jobs")).isEmpty)
                let sql = try await db.client.query("""
                    SELECT id FROM push.jobs WHERE labels @> '{"team": "growth"}' ORDER BY id DESC
                    """, logger: db.logger).collect().map { try $0.decode(Int64.self) }
                #expect(ids(try await dashboard.json("/jobs?label=team:growth", table: "jobs")) == sql.map { $0 })

                // The list exports and shows each job's labels; a badge links to the jobs carrying that label.
                let all = try await dashboard.json("/jobs", table: "jobs")
                let row = all.first { ($0["job"] as? NSNumber)?.int64Value == l.blackFriday }
                #expect(row?["labels"] as? String == "campaign=black-friday, team=growth")
                #expect(all.first { ($0["job"] as? NSNumber)?.int64Value == standard.broadcast }?["labels"] is NSNull)
                let list = try await HTTPClient.send("GET", dashboard.base + "/jobs")
                #expect(list.body.contains("<a class=\"badge\" href=\"/jobs?label=campaign%3Ablack-friday\""))
                #expect(list.body.contains(">campaign=black-friday</a>"))
                // Clicking a badge on a filtered list adds its label to the filters (and starts from the newest).
                let filtered = try await HTTPClient.send("GET", dashboard.base + "/jobs?label=team:growth&before=999999")
                let href = "/jobs?label=team%3Agrowth&amp;label=campaign%3Acyber-monday"
                #expect(filtered.body.contains("href=\"\(href)\""))
                let clicked = href.replacingOccurrences(of: "&amp;", with: "&")
                #expect(ids(try await dashboard.json(clicked, table: "jobs")) == [l.cyber])

                // In the browser: the form shows the filter, with a field to add another.
                let page = try await Browser.dumpDOM(dashboard.base + "/jobs?label=campaign:black-friday")
                let form = try #require(page.element(id: "table-jobs", tag: "table") != nil ? page : nil)
                #expect(form.contains("name=\"label\" value=\"campaign:black-friday\""))
                #expect(form.occurrences(of: "name=\"label\"") == 2)
                #expect(form.occurrences(of: "class=\"badge\"") == 2, "the one job's two labels")
                #expect(!form.contains("id=\"label-problem\""))

                // A malformed label is left out like any filter value that does not parse, and the page says so.
                let malformed = try await HTTPClient.send("GET", dashboard.base + "/jobs?label=black-friday")
                #expect(malformed.status == 200)
                #expect(malformed.body.contains("id=\"label-problem\""))
                #expect(malformed.body.contains("“black-friday” left out"))
                #expect(ids(try await dashboard.json("/jobs?label=black-friday", table: "jobs")) == ids(all))
                #expect(ids(try await dashboard.json("/jobs?label=campaign:black-friday&label=%3Ax", table: "jobs")) == [l.blackFriday])

                // The job's page: its labels as badges linking to the filtered list.
                let jobPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(l.blackFriday)")
                let labels = try #require(jobPage.element(id: "job-labels", tag: "dd"))
                #expect(labels.contains("href=\"/jobs?label=campaign%3Ablack-friday\""))
                #expect(labels.contains(">team=growth</a>"))
                #expect(!jobPage.contains("id=\"resent-from\"") && !jobPage.contains("/resend\""), "read-only: no action")
                #expect(try await HTTPClient.send("GET", dashboard.base + "/jobs/\(standard.broadcast)").body.contains("job-labels") == false)
                // Read-only: the resend is refused as every POST is.
                #expect(try await HTTPClient.send("POST", dashboard.base + "/jobs/\(l.blackFriday)/resend").status == 405)
                #expect(try await db.scalar(Int64.self, "SELECT count(*) FROM push.jobs WHERE resent_from IS NOT NULL") == 0)
            }
        }
    }

    @Test func replacedByIsALink() async throws {
        try await TestDatabase.with { db in
            _ = try await Seed.standard(db)
            let first = try await db.scalar(Int64.self, """
                SELECT push.enqueue('mixed', '{"aps":{"alert":"1"}}'::jsonb, tokens => \([Self.tokens[0]]), replace_key => 'chat-42')
                """)
            let second = try await db.scalar(Int64.self, """
                SELECT push.enqueue('mixed', '{"aps":{"alert":"2"}}'::jsonb, tokens => \([Self.tokens[0]]), replace_key => 'chat-42')
                """)
            try await DashboardHarness.with(DashboardHarness.configuration(), client: db.client, logger: db.logger) { dashboard in
                let page = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(first)")
                let link = try #require(page.body.element(id: "replaced-by", tag: "dd"))
                #expect(link.contains("href=\"/jobs/\(second)\""))
            }
        }
    }

    @Test func resendIsAnAuditedActionOfTheActionsGroup() async throws {
        try await TestDatabase.with { db in
            _ = try await Seed.standard(db)
            let l = try await Self.seed(db)
            // The dashboard's own login in the actions group: migration 0026 lets it call push.resend_failed.
            let login = try await db.createLogin(memberOf: "pgpush_dashboard_actions")
            var url = db.url
            url.username = login
            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: db.logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                let acting = DashboardHarness.configuration {
                    $0.allowActions = true
                    $0.password = Self.credentials.1
                }
                try await DashboardHarness.with(acting, client: client, logger: db.logger) { dashboard in
                    let origin = dashboard.base
                    let resend = dashboard.base + "/jobs/\(l.blackFriday)/resend"
                    // Offered on the finished job with failures, not on a queued one.
                    let jobPage = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(l.blackFriday)", credentials: Self.credentials)
                    #expect(jobPage.body.contains("action=\"/jobs/\(l.blackFriday)/resend\""))
                    #expect(jobPage.body.contains("Resend to failed tokens"))
                    let queuedPage = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(l.growth)", credentials: Self.credentials)
                    #expect(!queuedPage.body.contains("/resend\""))

                    // Cross-site or without credentials: refused, nothing resent.
                    #expect(try await HTTPClient.send("POST", resend, headers: ["Origin": origin]).status == 401)
                    #expect(try await HTTPClient.send("POST", resend, credentials: Self.credentials, headers: ["Sec-Fetch-Site": "cross-site"]).status == 403)
                    #expect(try await db.scalar(Int64.self, "SELECT count(*) FROM push.jobs WHERE resent_from IS NOT NULL") == 0)

                    // The resend: a new job to the 500 and 429 tokens, with the labels, audited; redirected to it.
                    let done = try await HTTPClient.send(
                        "POST", resend, credentials: Self.credentials, headers: ["Origin": origin, "Sec-Fetch-Site": "same-origin"])
                    #expect(done.status == 303)
                    let resent = try await db.scalar(Int64.self, "SELECT id FROM push.jobs WHERE resent_from = \(l.blackFriday)")
                    #expect(done.header("Location") == "/jobs/\(resent)")
                    #expect(try await db.strings("SELECT unnest(tokens) FROM push.jobs WHERE id = \(resent) ORDER BY 1") == [Self.tokens[1], Self.tokens[2]])
                    #expect(try await db.strings("SELECT app_id || ' ' || state || ' ' || labels::text FROM push.jobs WHERE id = \(resent)")
                        == [#"mixed queued {"team": "growth", "campaign": "black-friday"}"#])
                    let audit = try await db.client.query("""
                        SELECT actor, app_id, detail FROM push.operator_audit WHERE action = 'resend_failed'
                        """, logger: db.logger).collect().map { try $0.decode((String, String?, String?).self) }
                    #expect(audit.count == 1)
                    #expect(audit.first?.0 == "dashboard:admin (\(login))")
                    #expect(audit.first?.1 == "mixed")
                    #expect(audit.first?.2 == "job \(l.blackFriday) resent as job \(resent) (2 tokens)")

                    // Each job's page links to the other.
                    let newPage = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(resent)", credentials: Self.credentials)
                    #expect(try #require(newPage.body.element(id: "resent-from", tag: "dd")).contains("href=\"/jobs/\(l.blackFriday)\""))
                    #expect(try #require(newPage.body.element(id: "job-labels", tag: "dd")).contains("campaign=black-friday"))
                    let oldPage = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(l.blackFriday)", credentials: Self.credentials)
                    #expect(try #require(oldPage.body.element(id: "resends", tag: "dd")).contains("href=\"/jobs/\(resent)\""))
                    #expect(!oldPage.body.contains("id=\"resend-notice\""))

                    // Again: every failed token is in that resend already. Back to the job, with a notice; no audit.
                    let again = try await HTTPClient.send("POST", resend, credentials: Self.credentials, headers: ["Origin": origin])
                    #expect(again.status == 303)
                    #expect(again.header("Location") == "/jobs/\(l.blackFriday)?resend=none")
                    let notice = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(l.blackFriday)?resend=none", credentials: Self.credentials)
                    #expect(notice.body.contains("id=\"resend-notice\""))
                    #expect(try await db.scalar(Int64.self, "SELECT count(*) FROM push.jobs WHERE resent_from = \(l.blackFriday)") == 1)
                    #expect(try await db.scalar(Int64.self, "SELECT count(*) FROM push.operator_audit WHERE action = 'resend_failed'") == 1)

                    // An expired job is refused with the database's reason; an unknown one is 404.
                    try await db.execute("""
                        UPDATE push.jobs SET state = 'failed', failed = 1, finished_at = now(), created_at = now() - interval '1 hour',
                               expires_at = now() - interval '1 minute' WHERE id = \(l.cyber)
                        """)
                    let expired = try await HTTPClient.send("POST", dashboard.base + "/jobs/\(l.cyber)/resend", credentials: Self.credentials)
                    #expect(expired.status == 409)
                    #expect(expired.body.contains("expired"))
                    #expect(try await HTTPClient.send("POST", dashboard.base + "/jobs/999999/resend", credentials: Self.credentials).status == 404)
                }
            }
        }
    }
}
