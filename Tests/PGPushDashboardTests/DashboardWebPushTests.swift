import Foundation
import PGPushDashboard
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Web Push on the dashboard: a third platform beside iOS and Android on every page, and a pause of an app's Web
/// Push alone, shown apart from an app's pause and lifted by the resume action. Against a real PostgreSQL, read
/// and acted on through the dashboard's own logins (so the migrations' grants are what is tested), checked
/// against SQL.
@Suite(.database, .serialized, .timeLimit(.minutes(2)))
struct DashboardWebPushTests {
    static let credentials = ("admin", "correct horse")

    @Test func webIsAPlatformOfItsOwnOnEveryPage() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            let web = try await Seed.webPush(db)
            try await Self.withLogin(db, memberOf: "pgpush_dashboard") { client in
                // The store: each platform's part from the job's own counters, iOS what the others leave.
                let store = DashboardStore(client: client, logger: db.logger)
                let detail = try #require(try await store.read { try await $0.job(web) })
                #expect(detail.job.webTotal == Int64(Seed.webCount) && detail.job.webDelivered == 280 && detail.job.webFailed == 20)
                #expect(detail.job.androidTotal == Int64(Seed.androidCount))
                #expect(detail.job.iosTotal == Int64(Seed.iosCount) && detail.job.iosDelivered == Int64(Seed.iosCount)
                    && detail.job.iosFailed == 0)
                #expect(detail.prunedByPlatform == ["web": 10])
                #expect(detail.web?.contains("\"title\": \"Goal!\"") == true && detail.webUrgency == "low")
                let platform = { (p: String) in try await store.read { try await $0.jobs(DashboardJobFilter(platform: p)) }.map(\.id) }
                #expect(try await platform("web") == [web])
                #expect(try await platform("android") == [web, jobs.broadcast])
                #expect(Set(try await platform("ios")) == [web, jobs.broadcast, jobs.failed, jobs.queued])
                let app = try #require(try await store.read { try await $0.app("mixed") })
                #expect(app.webPushConfigured && app.vapidSubject == "mailto:push@mixed.example.com")
                #expect(app.vapidPublicKey == Seed.vapidPublicKey)
                #expect(app.webPushPausedReason == Seed.webPushPausedReason && app.pausedReason == nil)
                let overview = try await store.read { try await $0.overview() }
                #expect(overview.apps.map(\.webPushPausedReason) == [Seed.webPushPausedReason, nil])
                #expect(overview.sendsPerMinute.filter { $0.platform == "web" }.reduce(0) { $0 + $1.count } == 300)

                try await DashboardHarness.with(DashboardHarness.configuration(), client: client, logger: db.logger) { dashboard in
                    // The overview: `mixed`'s Web Push paused, apart from `news`, paused as a whole; web in the chart.
                    let overviewPage = try await Browser.dumpDOM(dashboard.base + "/")
                    let paused = try #require(overviewPage.element(id: "paused-apps", tag: "ul"))
                    #expect(paused.contains(">news</a>") && !paused.contains(">mixed</a>"))
                    let webPaused = try #require(overviewPage.element(id: "web-push-paused-apps", tag: "ul"))
                    #expect(webPaused.contains(">mixed</a>: Web Push paused: 403 {\"reason\":\"BadJwtToken\"} &lt;b&gt;"))
                    #expect(overviewPage.contains("<span class=\"web\">■ Web (Web Push)</span>"))
                    #expect(overviewPage.contains("class=\"line-web\""))
                    let sendsSQL = try await db.scalar(Int64.self, "SELECT count(*) FROM push.deliveries WHERE sent_at > now() - interval '59 minutes'")
                    #expect(overviewPage.contains("Sends per minute over the last hour: \(Self.format(sendsSQL)) in all"))
                    let status = try await dashboard.json("/", table: "apps").map { $0["status"] as? String }
                    #expect(status == ["Web Push paused: " + Seed.webPushPausedReason, "paused: " + Seed.scriptReason])

                    // The job's page: a web row beside iOS and Android, as push.deliveries counts them.
                    let jobPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(web)")
                    let platforms = try #require(jobPage.element(id: "table-platforms", tag: "table"))
                    #expect(platforms.contains("<td>ios</td><td class=\"num\">1,500</td><td class=\"num\">1,500</td><td class=\"num\">0</td><td class=\"num\">0</td>"))
                    #expect(platforms.contains("<td>android</td><td class=\"num\">500</td><td class=\"num\">500</td><td class=\"num\">0</td><td class=\"num\">0</td>"))
                    #expect(platforms.contains("<td>web</td><td class=\"num\">300</td><td class=\"num\">280</td><td class=\"num\">20</td><td class=\"num\">10</td>"))
                    let byPlatform = try await dashboard.json("/jobs/\(web)", table: "platforms")
                    #expect(byPlatform.map { $0["platform"] as? String } == ["ios", "android", "web"])
                    for row in try await db.client.query("""
                        SELECT platform, count(*), count(*) FILTER (WHERE status BETWEEN 200 AND 299) FROM push.deliveries
                         WHERE job_id = \(web) GROUP BY 1
                        """, logger: db.logger).collect() {
                        let (platform, total, delivered) = try row.decode((String, Int64, Int64).self)
                        let shown = byPlatform.first { $0["platform"] as? String == platform }
                        #expect((shown?["total"] as? NSNumber)?.int64Value == total, "\(platform) total")
                        #expect((shown?["delivered"] as? NSNumber)?.int64Value == delivered, "\(platform) delivered")
                    }
                    #expect(try #require(jobPage.element(id: "web-message", tag: "pre")).contains("Goal!"))
                    #expect(jobPage.contains("(urgency low)"))
                    #expect(jobPage.contains("Web 280 delivered, 20 failed; of 2,300"), "the progress bar's web part")

                    // The jobs list filters by the web platform; its form offers it.
                    #expect(try await dashboard.json("/jobs?platform=web", table: "jobs").map { ($0["job"] as? NSNumber)?.int64Value } == [web])
                    #expect(try await HTTPClient.send("GET", dashboard.base + "/jobs").body.contains("<option value=\"web\">web</option>"))

                    // Outcomes of the web, as SQL counts them, with the Web Push reasons' hints.
                    let outcomes = try await dashboard.json("/outcomes?platform=web", table: "outcomes")
                    #expect(Set(outcomes.map { $0["platform"] as? String }) == ["web"])
                    #expect(outcomes.reduce(0) { $0 + (($1["count"] as? NSNumber)?.int64Value ?? 0) }
                        == (try await db.scalar(Int64.self, "SELECT count(*) FROM push.deliveries WHERE platform = 'web'")))
                    let outcomesPage = try await Browser.dumpDOM(dashboard.base + "/outcomes?platform=web")
                    #expect(outcomesPage.contains("<a href=\"#hint-EndpointNotAllowed\">EndpointNotAllowed</a>"))
                    #expect(outcomesPage.contains("<dt id=\"hint-Gone\" class=\"bad\">Gone</dt>"))

                    // The app's page: its Web Push, paused on its own, the app itself active.
                    let appPage = try await Browser.dumpDOM(dashboard.base + "/apps/mixed")
                    let webPush = try #require(appPage.element(id: "web-push", tag: "dd"))
                    #expect(webPush.contains("subject mailto:push@mixed.example.com"))
                    #expect(webPush.contains(Seed.vapidPublicKey))
                    #expect(try #require(appPage.element(id: "web-push-pause-reason", tag: "span"))
                        .contains("Web Push paused: 403 {\"reason\":\"BadJwtToken\"} &lt;b&gt;"))
                    #expect(appPage.contains("<dt>Status</dt><dd>active</dd>"))
                    // Its failures: a push service's 201 is a delivery, not a failure.
                    let failures = try await dashboard.json("/apps/mixed", table: "failures")
                    #expect(failures.map { ($0["status"] as? NSNumber)?.intValue }.sorted { ($0 ?? 0) < ($1 ?? 0) } == [0, 410])
                    #expect(failures.reduce(0) { $0 + (($1["count"] as? NSNumber)?.int64Value ?? 0) } == 20)
                    #expect(appPage.occurrences(of: "<script") == 1)
                }
            }
        }
    }

    /// The resume action lifts a pause of the app's Web Push alone, through the dashboard's actions login (the
    /// column's grant is the migration's), audited; a second resume changes nothing; an app paused as a whole
    /// and in its Web Push is resumed from both at once.
    @Test func resumeLiftsAPausedWebPush() async throws {
        try await TestDatabase.with { db in
            _ = try await Seed.standard(db)
            _ = try await Seed.webPush(db)
            let configuration = DashboardHarness.configuration {
                $0.allowActions = true
                $0.password = Self.credentials.1
            }
            try await Self.withLogin(db, memberOf: "pgpush_dashboard_actions") { client in
                try await DashboardHarness.with(configuration, client: client, logger: db.logger) { dashboard in
                    let origin = dashboard.base
                    let appPage = try await HTTPClient.send("GET", dashboard.base + "/apps/mixed", credentials: Self.credentials)
                    #expect(appPage.body.contains(">Resume Web Push</button>") && appPage.body.contains(">Pause app</button>"))
                    #expect(appPage.body.contains("action=\"/apps/mixed/resume\""))

                    let resume = { try await HTTPClient.send("POST", dashboard.base + "/apps/mixed/resume", credentials: Self.credentials, headers: ["Origin": origin]) }
                    #expect(try await resume().status == 303)
                    #expect(try await db.strings("""
                        SELECT coalesce(paused_reason, 'active') || ' / ' || coalesce(web_push_paused_reason, 'sending') FROM push.apps WHERE id = 'mixed'
                        """) == ["active / sending"])
                    let audit = { try await db.strings("SELECT action || ': ' || coalesce(detail, '') FROM push.operator_audit WHERE app_id = 'mixed' ORDER BY id") }
                    #expect(try await audit() == ["resume_app: Web Push only (Web Push was paused: \(Seed.webPushPausedReason))"])
                    let resumed = try await HTTPClient.send("GET", dashboard.base + "/apps/mixed", credentials: Self.credentials)
                    #expect(!resumed.body.contains("Resume") && resumed.body.contains("<br>sending</dd>"))

                    // Nothing paused: nothing to do, nothing audited.
                    #expect(try await resume().status == 303)
                    #expect(try await audit().count == 1)

                    // Paused as a whole and in its Web Push: one resume lifts both.
                    try await db.execute("""
                        UPDATE push.apps SET paused_reason = 'rotating keys', paused_at = now(), web_push_paused_reason = '401 Unauthorized'
                         WHERE id = 'mixed'
                        """)
                    let both = try await HTTPClient.send("GET", dashboard.base + "/apps/mixed", credentials: Self.credentials)
                    #expect(both.body.contains(">Resume app</button>") && !both.body.contains("Resume Web Push"))
                    #expect(try await resume().status == 303)
                    #expect(try await db.strings("""
                        SELECT coalesce(paused_reason, 'active') || ' / ' || coalesce(web_push_paused_reason, 'sending') FROM push.apps WHERE id = 'mixed'
                        """) == ["active / sending"])
                    #expect(try await audit().last == "resume_app: the app and its Web Push (Web Push was paused: 401 Unauthorized)")

                    // A whole-app pause alone: resumed and audited as before, without a detail.
                    try await db.execute("UPDATE push.apps SET paused_reason = 'InvalidProviderToken', paused_at = now() WHERE id = 'mixed'")
                    #expect(try await resume().status == 303)
                    #expect(try await audit().last == "resume_app: ")
                }
            }
        }
    }

    /// The store's resume, as the actions login runs it: what it reports for a Web Push pause, none, an unknown
    /// app and an app the login is not granted (whose pause stays).
    @Test func theStoresResumeReportsAWebPushPause() async throws {
        try await TestDatabase.with { db in
            _ = try await Seed.standard(db)
            _ = try await Seed.webPush(db)
            try await db.execute("UPDATE push.apps SET vapid_private_key_path = 'v.pem', vapid_public_key = \(Seed.vapidPublicKey), vapid_subject = 'https://news.example.com', web_push_paused_reason = '401' WHERE id = 'news'")
            try await Self.withLogin(db, memberOf: "pgpush_dashboard_actions") { client in
                let store = DashboardStore(client: client, logger: db.logger)
                let results = [
                    try await store.resumeApp("mixed", user: "ops"), try await store.resumeApp("mixed", user: "ops"),
                    try await store.resumeApp("nope", user: "ops"),
                ]
                #expect(results == [.done, .unchanged, .notFound])
                #expect(try await db.strings("SELECT detail FROM push.operator_audit WHERE action = 'resume_app'")
                    == ["Web Push only (Web Push was paused: \(Seed.webPushPausedReason))"])
            }
            let login = try await db.createLogin(memberOf: "pgpush_dashboard_actions")
            try await db.execute("SELECT push.grant_app(\(login), 'mixed')")
            var url = db.url
            url.username = login
            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 1), backgroundLogger: db.logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                let result = try await DashboardStore(client: client, logger: db.logger).resumeApp("news", user: "ops")
                #expect(result == .notFound)
            }
            #expect(try await db.strings("SELECT web_push_paused_reason || ' / ' || paused_reason FROM push.apps WHERE id = 'news'")
                == ["401 / " + Seed.scriptReason])
        }
    }

    /// A client logged in as a new login in `role`, the group a dashboard's login is in.
    static func withLogin(_ db: TestDatabase, memberOf role: String, _ body: @Sendable (PostgresClient) async throws -> Void) async throws {
        let login = try await db.createLogin(memberOf: role)
        var url = db.url
        url.username = login
        let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: db.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await body(client)
        }
    }

    static func format(_ n: Int64) -> String {
        let digits = String(n)
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(ch)
        }
        return out
    }
}

extension Seed {
    static let webCount = 300
    static let vapidPublicKey = "BBqu8zdH-YfQ4EFxIxrsSFEdo8JWPfOpx1fDJwuSAd0r2gBhzkFYLGOX7u1FNooTvt7YvEncyn9y0A5p6ZQ6YcY"
    static let webPushPausedReason = #"403 {"reason":"BadJwtToken"} <b>"#

    /// After ``standard(_:)``: Web Push for `mixed` (paused, a push service having refused its VAPID key), 300 web
    /// devices, and a finished job to its 1,500 iOS, 500 Android and 300 web devices: every web device answered
    /// but 10 gone (pruned) and 10 at an origin the workers do not send to. Returns the job.
    static func webPush(_ db: TestDatabase) async throws -> Int64 {
        try await db.execute("""
            UPDATE push.apps SET vapid_private_key_path = 'vapid.pem', vapid_public_key = \(vapidPublicKey),
                   vapid_subject = 'mailto:push@mixed.example.com'
             WHERE id = 'mixed'
            """)
        // The subscription keys of RFC 8291's example: a P-256 point and a 16-byte secret.
        try await db.execute("""
            INSERT INTO push.devices (app_id, token, platform, web_p256dh, web_auth)
            SELECT 'mixed', 'https://web.push.apple.com/subscription-' || lpad(i::text, 6, '0'), 'web',
                   'BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4', 'BTBZMqHH6r4Tts7J_aSIgg'
              FROM generate_series(1, \(webCount)) i
            """)
        let job = try await db.scalar(Int64.self, """
            SELECT push.enqueue('mixed', '{"aps":{"alert":{"title":"Goal","body":"2-1"}}}',
                                web => '{"title": "Goal!", "body": "2-1 in the 89th"}', web_urgency => 'low')
            """)
        let total = iosCount + androidCount + webCount
        try await db.execute("""
            UPDATE push.jobs SET state = 'done', total = \(total), android_total = \(androidCount), web_total = \(webCount),
                   delivered = \(total - 20), android_delivered = \(androidCount), web_delivered = \(webCount - 20),
                   failed = 20, web_failed = 20, pruned = 10,
                   started_at = now() - interval '20 seconds', first_sent_at = now() - interval '20 seconds',
                   finished_at = now() - interval '10 seconds'
             WHERE id = \(job)
            """)
        try await db.execute("""
            INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at, platform)
            SELECT \(job), app_id, token,
                   CASE WHEN platform <> 'web' THEN 200 WHEN n <= 10 THEN 410 WHEN n <= 20 THEN 0 ELSE 201 END,
                   CASE WHEN platform <> 'web' THEN NULL WHEN n <= 10 THEN 'Gone' WHEN n <= 20 THEN 'EndpointNotAllowed' END,
                   1, now() - interval '20 seconds', platform
              FROM (SELECT app_id, token, platform, row_number() OVER (PARTITION BY platform ORDER BY token) AS n
                      FROM push.devices WHERE app_id = 'mixed') d
            """)
        try await db.execute("""
            INSERT INTO push.pruned_devices (app_id, token, reason, job_id)
            SELECT app_id, token, 'Gone', job_id FROM push.deliveries WHERE job_id = \(job) AND reason = 'Gone'
            """)
        try await db.execute("UPDATE push.apps SET web_push_paused_reason = \(webPushPausedReason) WHERE id = 'mixed'")
        return job
    }
}
