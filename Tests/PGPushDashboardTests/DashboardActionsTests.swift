import Foundation
import PGPushDashboard
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// `--allow-actions`: the password, the cross-site refusal, an action that works and is audited; and tenancy.
@Suite(.database, .serialized, .timeLimit(.minutes(2)))
struct DashboardActionsTests {
    static let credentials = ("admin", "correct horse")

    @Test func actionsNeedThePasswordRefuseCrossSiteAndAreAudited() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            let configuration = DashboardHarness.configuration {
                $0.allowActions = true
                $0.password = Self.credentials.1
            }
            try await DashboardHarness.with(configuration, client: db.client, logger: db.logger) { dashboard in
                let cancel = dashboard.base + "/jobs/\(jobs.queued)/cancel"
                let origin = dashboard.base.replacingOccurrences(of: "/jobs", with: "")

                // Without credentials: 401, for pages and actions alike.
                let page = try await HTTPClient.send("GET", dashboard.base + "/")
                #expect(page.status == 401)
                #expect(page.header("WWW-Authenticate")?.hasPrefix("Basic") == true)
                #expect(try await HTTPClient.send("POST", cancel, headers: ["Origin": origin]).status == 401)
                #expect(try await HTTPClient.send("POST", cancel, credentials: ("admin", "wrong"), headers: ["Origin": origin]).status == 401)

                // Cross-site, with credentials: 403.
                #expect(try await HTTPClient.send("POST", cancel, credentials: Self.credentials, headers: ["Sec-Fetch-Site": "cross-site"]).status == 403)
                #expect(try await HTTPClient.send("POST", cancel, credentials: Self.credentials, headers: ["Origin": "http://evil.example"]).status == 403)
                #expect(try await db.strings("SELECT state FROM push.jobs WHERE id = \(jobs.queued)") == ["queued"])
                #expect(try await db.scalar(Int64.self, "SELECT count(*) FROM push.operator_audit WHERE action = 'cancel_job'") == 0)

                // The job's page offers the action; same-origin with credentials cancels and audits.
                let jobPage = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(jobs.queued)", credentials: Self.credentials)
                #expect(jobPage.body.contains("action=\"/jobs/\(jobs.queued)/cancel\""))
                let done = try await HTTPClient.send(
                    "POST", cancel, credentials: Self.credentials, headers: ["Origin": origin, "Sec-Fetch-Site": "same-origin"])
                #expect(done.status == 303)
                #expect(done.header("Location") == "/jobs/\(jobs.queued)")
                #expect(try await db.strings("SELECT state FROM push.jobs WHERE id = \(jobs.queued)") == ["cancelled"])
                let audit = try await db.client.query("""
                    SELECT actor, app_id, detail FROM push.operator_audit WHERE action = 'cancel_job'
                    """, logger: db.logger).collect().map { try $0.decode((String, String?, String?).self) }
                #expect(audit.count == 1)
                #expect(audit.first?.0.hasPrefix("dashboard:admin (") == true)
                #expect(audit.first?.1 == "news")
                #expect(audit.first?.2 == "job \(jobs.queued)")

                // Pause with a reason, then resume: each through the CLI's statements, each audited.
                let pause = try await HTTPClient.send(
                    "POST", dashboard.base + "/apps/mixed/pause", credentials: Self.credentials, headers: ["Origin": origin],
                    form: "reason=rotating+the+key")
                #expect(pause.status == 303)
                #expect(try await db.strings("SELECT paused_reason FROM push.apps WHERE id = 'mixed'") == ["paused from the dashboard: rotating the key"])
                let appPage = try await HTTPClient.send("GET", dashboard.base + "/apps/mixed", credentials: Self.credentials)
                #expect(appPage.body.contains("by dashboard:admin ("))
                #expect(try await HTTPClient.send(
                    "POST", dashboard.base + "/apps/mixed/pause", credentials: Self.credentials, headers: ["Origin": origin]).status == 400)
                let resume = try await HTTPClient.send("POST", dashboard.base + "/apps/mixed/resume", credentials: Self.credentials, headers: ["Origin": origin])
                #expect(resume.status == 303)
                #expect(try await db.strings("SELECT coalesce(paused_reason, 'active') FROM push.apps WHERE id = 'mixed'") == ["active"])
                #expect(try await db.strings("SELECT action FROM push.operator_audit WHERE app_id = 'mixed' ORDER BY id")
                    == ["pause_app", "resume_app"])
                #expect(try await HTTPClient.send("POST", dashboard.base + "/jobs/999999/cancel", credentials: Self.credentials).status == 404)
            }
        }
    }

    @Test func aLoginGrantedOneAppSeesOnlyThatApp() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            // The dashboard's own login in the read-only group the migrations make, granted `mixed`.
            let login = try await db.createLogin(memberOf: "pgpush_dashboard")
            try await db.execute("SELECT push.grant_app(\(login), 'mixed')")
            var url = db.url
            url.username = login
            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: db.logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                try await DashboardHarness.with(DashboardHarness.configuration(), client: client, logger: db.logger) { dashboard in
                    let overview = try await Browser.dumpDOM(dashboard.base + "/")
                    #expect(overview.contains(">mixed</a>"))
                    #expect(!overview.contains("news"))
                    let mixedSends = try await db.scalar(
                        Int64.self, "SELECT count(*) FROM push.deliveries WHERE app_id = 'mixed' AND sent_at > now() - interval '59 minutes'")
                    #expect(overview.contains("Sends per minute over the last hour: \(Format(mixedSends)) in all"))
                    #expect(try await dashboard.json("/", table: "apps").map { $0["app"] as? String } == ["mixed"])
                    #expect(try await dashboard.json("/jobs", table: "jobs").map { ($0["job"] as? NSNumber)?.int64Value } == [jobs.broadcast])
                    #expect(Set(try await dashboard.json("/outcomes", table: "outcomes").map { $0["app"] as? String }) == ["mixed"])
                    #expect(try await dashboard.json("/pruned", table: "recent").isEmpty)
                    #expect(Set(try await dashboard.json("/audit", table: "audit").map { $0["app"] as? String }) == ["mixed"])
                    #expect(try await HTTPClient.send("GET", dashboard.base + "/apps/news").status == 404)
                    #expect(try await HTTPClient.send("GET", dashboard.base + "/jobs/\(jobs.failed)").status == 404)
                }
                // Its actions reach only its apps, even in the group with the privileges the actions need.
                try await db.execute("GRANT pgpush_dashboard_actions TO \(unescaped: login)")
                let acting = DashboardHarness.configuration {
                    $0.allowActions = true
                    $0.password = Self.credentials.1
                }
                try await DashboardHarness.with(acting, client: client, logger: db.logger) { dashboard in
                    let refusedCancel = try await HTTPClient.send("POST", dashboard.base + "/jobs/\(jobs.queued)/cancel", credentials: Self.credentials)
                    #expect(refusedCancel.status == 404)
                    let refusedPause = try await HTTPClient.send(
                        "POST", dashboard.base + "/apps/news/pause", credentials: Self.credentials, form: "reason=not+mine")
                    #expect(refusedPause.status == 404)
                    #expect(try await db.strings("SELECT state FROM push.jobs WHERE id = \(jobs.queued)") == ["queued"])
                    #expect(try await db.strings("SELECT paused_reason FROM push.apps WHERE id = 'news'") == [Seed.scriptReason])
                    let ownPause = try await HTTPClient.send(
                        "POST", dashboard.base + "/apps/mixed/pause", credentials: Self.credentials, form: "reason=mine")
                    #expect(ownPause.status == 303)
                    #expect(try await db.strings("SELECT actor FROM push.operator_audit WHERE action = 'pause_app'") == ["dashboard:admin (\(login))"])
                }
            }
        }
    }

    @Test func aBasePathPrefixesEveryRouteAndLink() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            let configuration = DashboardHarness.configuration { $0.basePath = "/pgpush" }
            try await DashboardHarness.with(configuration, client: db.client, logger: db.logger) { dashboard in
                #expect(dashboard.base.hasSuffix("/pgpush"))
                for path in ["", "/", "/jobs", "/jobs/\(jobs.broadcast)", "/apps/mixed", "/outcomes", "/pruned", "/audit", "/assets/app.css"] {
                    #expect(try await HTTPClient.send("GET", dashboard.base + path).status == 200, "\(path)")
                }
                let root = dashboard.base.replacingOccurrences(of: "/pgpush", with: "")
                #expect(try await HTTPClient.send("GET", root + "/jobs").status == 404)
                let page = try await HTTPClient.send("GET", dashboard.base + "/")
                #expect(page.body.contains("href=\"/pgpush/assets/app.css\"") && page.body.contains("href=\"/pgpush/apps/mixed\""))
                #expect(!page.body.contains("href=\"/jobs\""))
            }
        }
    }

    private func Format(_ n: Int64) -> String {
        let digits = String(n)
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(ch)
        }
        return out
    }
}
