import Foundation
import PGPushDashboard
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Broadcast controls on the dashboard (migration 0028): the job page's capped count, throttle, estimated finish
/// and zones still to come, the app page's time zone, quiet hours and caps; read by the dashboard's own login,
/// then shown in a real browser.
@Suite(.database, .serialized, .timeLimit(.minutes(2)))
struct DashboardBroadcastControlsTests {
    struct Seeded: Sendable {
        /// A running local-time job: 2 delivered, 3 capped, a throttle of 12.5/s, Asia/Tokyo (4 tokens) due in
        /// an hour and Europe/Paris (1) in two.
        let local: Int64
        /// A finished throttled job with nothing waiting.
        let throttled: Int64
    }

    static func seed(_ db: TestDatabase) async throws -> Seeded {
        try await db.createApp("paced", topic: "com.example.paced")
        try await db.execute("""
            UPDATE push.apps SET default_timezone = 'Europe/Paris', quiet_hours = '22:00-08:00',
                   frequency_caps = '{"marketing": {"max": 3, "per": "24 hours"}, "digest": {"max": 1, "per": "7 days"}}'
             WHERE id = 'paced'
            """)
        let local = try await db.scalar(Int64.self, """
            SELECT push.enqueue('paced', '{"aps":{"alert":"Digest"}}', local_time => '09:00', category => 'marketing')
            """)
        try await db.execute("""
            UPDATE push.jobs SET state = 'running', started_at = now(), total = 10, delivered = 2, capped = 3, throttle = 12.5
             WHERE id = \(local)
            """)
        try await db.execute("""
            INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, lo_token, estimated_tokens, next_attempt_at, zone)
            VALUES (\(local), 'paced', 0, 1, 'range', '', 4, now() + interval '1 hour', 'Asia/Tokyo'),
                   (\(local), 'paced', 0, 2, 'range', '', 1, now() + interval '2 hours', 'Europe/Paris')
            """)
        let throttled = try await db.scalar(Int64.self, """
            SELECT push.enqueue('paced', '{"aps":{"alert":"New episode"}}', max_rate => 500, respect_quiet_hours => false)
            """)
        try await db.execute("""
            UPDATE push.jobs SET state = 'done', started_at = now(), total = 4, delivered = 4, throttle = 500, finished_at = now()
             WHERE id = \(throttled)
            """)
        // The local job's outcomes so far: one token held back by the cap, one that failed.
        try await db.execute("""
            INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at, platform)
            VALUES (\(local), 'paced', \(TestTokens.token(1)), 0, 'FrequencyCapped', 1, now(), 'ios'),
                   (\(local), 'paced', \(TestTokens.token(2)), 410, 'Unregistered', 1, now(), 'ios')
            """)
        return Seeded(local: local, throttled: throttled)
    }

    @Test func theStoreReadsTheControlsAsTheDashboardsLogin() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Self.seed(db)
            let login = try await db.createLogin(memberOf: "pgpush_dashboard")
            var url = db.url
            url.username = login
            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: db.logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                let store = DashboardStore(client: client, logger: db.logger)

                let local = try #require(try await store.read { try await $0.job(jobs.local) })
                #expect(local.job.capped == 3)
                #expect(local.pacing.localTime == "09:00" && local.pacing.category == "marketing")
                #expect(local.pacing.respectQuietHours == true && local.pacing.maxRate == nil)
                #expect(local.pacing.throttle == 12.5)
                #expect(local.pacing.waitingTokens == 5)
                #expect(local.pacing.waitingZones.map(\.zone) == ["Asia/Tokyo", "Europe/Paris"])
                let paris = try #require(local.pacing.waitingZones.last?.moment)
                #expect(local.pacing.estimatedFinishAt.map { abs($0.timeIntervalSince(paris)) < 1 } == true)

                let throttled = try #require(try await store.read { try await $0.job(jobs.throttled) })
                #expect(throttled.pacing.maxRate == 500 && throttled.pacing.respectQuietHours == false)
                #expect(throttled.pacing.estimatedFinishAt == nil && throttled.pacing.waitingZones.isEmpty,
                        "a finished job waits for nothing")

                let app = try #require(try await store.read { try await $0.app("paced") })
                #expect(app.defaultTimezone == "Europe/Paris" && app.quietHours == "22:00-08:00")
                #expect(app.frequencyCaps?.contains("marketing") == true)
                #expect(app.failures.map(\.reason) == ["Unregistered"], "a capped token is not a failure")
            }
        }
    }

    @Test func theJobAndAppPagesShowThem() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Self.seed(db)
            try await DashboardHarness.with(DashboardHarness.configuration(), client: db.client, logger: db.logger) { dashboard in
                let page = try await Browser.dumpDOM(dashboard.base + "/jobs/\(jobs.local)")
                #expect(try #require(page.element(id: "job-capped", tag: "dd")).contains("3"))
                #expect(try #require(page.element(id: "job-throttle", tag: "dd")).contains("throttle 12.5/s in effect"))
                #expect(page.element(id: "job-estimated-finish", tag: "dd") != nil)
                #expect(try #require(page.element(id: "job-local-time", tag: "dd")).contains("09:00"))
                #expect(try #require(page.element(id: "job-waiting", tag: "dd")).contains("5 tokens in 2 zones"))
                let zones = try #require(page.element(id: "table-waiting-zones", tag: "table"))
                let tokyo = try #require(zones.range(of: "Asia/Tokyo"))
                let paris = try #require(zones.range(of: "Europe/Paris"))
                #expect(tokyo.lowerBound < paris.lowerBound, "soonest first")
                let exported = try await dashboard.json("/jobs/\(jobs.local)", table: "waiting-zones")
                #expect(exported.map { $0["zone"] as? String } == ["Asia/Tokyo", "Europe/Paris"])

                let throttled = try await Browser.dumpDOM(dashboard.base + "/jobs/\(jobs.throttled)")
                #expect(try #require(throttled.element(id: "job-throttle", tag: "dd")).contains("max_rate 500/s"))
                #expect(try #require(throttled.element(id: "job-quiet-hours", tag: "dd")).contains("ignored"))
                #expect(throttled.element(id: "job-waiting", tag: "dd") == nil)
                #expect(throttled.element(id: "table-waiting-zones", tag: "table") == nil)

                let app = try await Browser.dumpDOM(dashboard.base + "/apps/paced")
                #expect(try #require(app.element(id: "default-timezone", tag: "dd")).contains("Europe/Paris"))
                #expect(try #require(app.element(id: "quiet-hours", tag: "dd")).contains("22:00-08:00"))
                let caps = try #require(app.element(id: "frequency-caps", tag: "dd"))
                #expect(caps.contains("digest: 1 per 7 days") && caps.contains("marketing: 3 per 24 hours"), "\(caps)")
            }
        }
    }
}
