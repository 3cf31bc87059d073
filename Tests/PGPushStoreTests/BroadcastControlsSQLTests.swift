import Foundation
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Issue 46's SQL contract: the controls' columns and arguments, each refusal naming its field and leaving no
/// row, the moment rule, and how expansion schedules a paced job per zone and per chunk.
@Suite(.database, .timeLimit(.minutes(3)))
struct BroadcastControlsSQLTests {
    static func refusal(_ db: TestDatabase, _ statement: String) async throws -> (message: String, column: String?) {
        do {
            try await db.exec(PostgresQuery(unsafeSQL: statement))
        } catch {
            let column = (error as? PSQLError)?.serverInfo?[.columnName]
            return (try #require(serverMessage(of: error)), column)
        }
        Issue.record("accepted: \(statement)")
        return ("", nil)
    }

    static func text(_ db: TestDatabase, _ query: PostgresQuery) async throws -> String? {
        for try await value in try await db.rows(query).decode(String?.self) { return value }
        return nil
    }

    static let payload = #"'{"aps":{"alert":"hi"}}'"#

    @Test(arguments: [
        ("SELECT push.enqueue('app', \(payload), max_rate => 0)", "max_rate", "positive"),
        ("SELECT push.enqueue('app', \(payload), max_rate => -5)", "max_rate", "positive"),
        ("SELECT push.enqueue('app', \(payload), max_rate => 10, spread_over => interval '1 hour')", "spread_over", "not both"),
        ("SELECT push.enqueue('app', \(payload), spread_over => interval '-1 minute')", "spread_over", "longer than zero"),
        ("SELECT push.enqueue('app', \(payload), category => 'no spaces')", "category", "letters"),
        ("SELECT push.register_device('app', repeat('a', 64), timezone => 'Mars/Olympus')", "timezone", "IANA"),
        ("SELECT push.register_device('app', repeat('a', 64), timezone => 'EST5EDT-x')", "timezone", "IANA"),
        ("UPDATE push.apps SET default_timezone = 'Atlantis/Capital'", "default_timezone", "IANA"),
        ("UPDATE push.apps SET quiet_hours = '22:00-8:00'", "quiet_hours", "HH:MM-HH:MM"),
        ("UPDATE push.apps SET quiet_hours = '24:00-08:00'", "quiet_hours", "HH:MM-HH:MM"),
        ("UPDATE push.apps SET quiet_hours = '08:00-08:00'", "quiet_hours", "same minute"),
        ("UPDATE push.apps SET frequency_caps = '[1]'", "frequency_caps", "object of categories"),
        (#"UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 0, "per": "1 day"}}'"#, "frequency_caps", "marketing.max"),
        (#"UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 2.5, "per": "1 day"}}'"#, "frequency_caps", "marketing.max"),
        (#"UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 2, "per": "soon"}}'"#, "frequency_caps", "marketing.per"),
        (#"UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 2, "per": "-1 day"}}'"#, "frequency_caps", "marketing.per"),
        (#"UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 2}}'"#, "frequency_caps", "marketing must be"),
        (#"UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 2, "per": "1 day", "extra": 1}}'"#, "frequency_caps", "marketing must be"),
    ])
    func badInputIsRefusedWithTheFieldNamedAndLeavesNoRow(_ statement: String, _ field: String, _ why: String) async throws {
        try await TestDatabase.with { db in
            try await db.createApp()
            let (message, column) = try await Self.refusal(db, statement)
            #expect(message.contains(field) && message.contains(why), "\(message)")
            #expect(column == field, "column \(String(describing: column)) for \(message)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
            #expect(try await Self.text(db, "SELECT quiet_hours || default_timezone || coalesce(frequency_caps::text, '') FROM push.apps") == nil)
            #expect(try await Self.text(db, "SELECT default_timezone FROM push.apps") == "UTC")
        }
    }

    @Test func goodControlsAreKeptAndQuietHoursDefaultByPriority() async throws {
        try await TestDatabase.with { db in
            try await db.createApp()
            try await db.exec("""
                UPDATE push.apps SET default_timezone = 'Europe/Paris', quiet_hours = '22:00-08:00',
                       frequency_caps = '{"marketing": {"max": 3, "per": "24 hours"}}'
                """)
            try await db.exec("SELECT push.register_device('app', repeat('b', 64), timezone => 'America/New_York')")
            // A registration without a zone keeps the one the device has.
            try await db.exec("SELECT push.register_device('app', repeat('b', 64), user_id => 'u1')")
            #expect(try await Self.text(db, "SELECT timezone FROM push.devices") == "America/New_York")
            let low = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('app', \(Self.payload), category => 'marketing', max_rate => 50)"))
            let urgent = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('app', \(Self.payload), priority => 10)"))
            let overridden = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('app', \(Self.payload), priority => 10, respect_quiet_hours => true)"))
            #expect(try await Self.text(db, "SELECT respect_quiet_hours::text || paced::text FROM push.jobs WHERE id = \(low)") == "truetrue")
            #expect(try await Self.text(db, "SELECT respect_quiet_hours::text || paced::text FROM push.jobs WHERE id = \(urgent)") == "falsefalse")
            #expect(try await Self.text(db, "SELECT respect_quiet_hours::text || paced::text FROM push.jobs WHERE id = \(overridden)") == "truetrue")
            #expect(try await Self.text(db, "SELECT category || max_rate FROM push.jobs WHERE id = \(low)") == "marketing50")
        }
    }

    @Test(arguments: [
        // due (UTC), zone, local time, quiet hours, expected moment (UTC)
        ("2026-11-28 10:30", "UTC", "09:00", nil, "2026-11-29 09:00"),
        ("2026-11-28 08:30", "UTC", "09:00", nil, "2026-11-28 09:00"),
        ("2026-11-28 09:00", "UTC", "09:00", nil, "2026-11-28 09:00"),
        ("2026-11-28 10:30", "Etc/GMT-1", "11:31", nil, "2026-11-28 10:31"),
        ("2026-11-28 10:30", "Etc/GMT+1", "09:31", nil, "2026-11-28 10:31"),
        ("2026-11-28 23:30", "Europe/Paris", nil, "22:00-08:00", "2026-11-29 07:00"),
        ("2026-11-28 06:00", "Europe/Paris", nil, "22:00-08:00", "2026-11-28 07:00"),
        ("2026-11-28 12:00", "Europe/Paris", nil, "22:00-08:00", "2026-11-28 12:00"),
        ("2026-11-28 12:30", "UTC", nil, "12:00-13:00", "2026-11-28 13:00"),
        // A local time inside quiet hours waits for the window's end.
        ("2026-11-28 10:00", "UTC", "23:00", "22:00-07:00", "2026-11-29 07:00"),
        // Daylight saving: 02:30 does not exist in Paris on 2026-03-29 (clocks go 02:00 → 03:00).
        ("2026-03-29 00:30", "Europe/Paris", "09:00", nil, "2026-03-29 07:00"),
    ] as [(String, String, String?, String?, String)])
    func aDevicesMomentIsTheFirstLocalTimeAtOrAfterSendAtOutsideQuietHours(
        _ due: String, _ zone: String, _ localTime: String?, _ quiet: String?, _ expected: String
    ) async throws {
        try await TestDatabase.with { db in
            let moment = try await Self.text(db, """
                SELECT to_char(push.local_moment((\(due) || '+00')::timestamptz, \(zone), \(localTime)::time, \(quiet)) AT TIME ZONE 'UTC',
                               'YYYY-MM-DD HH24:MI')
                """)
            #expect(moment == expected)
        }
    }

    @Test func aThrottledJobIsScheduledInTenthOfASecondChunksAndAOneTokenJobIsNot() async throws {
        try await TestDatabase.with { db in
            try await db.createApp(rateLimit: 400)
            try await db.exec("""
                INSERT INTO push.devices (app_id, token) SELECT 'app', lpad(to_hex(g), 64, '0') FROM generate_series(1, 1000) g
                """)
            let store = QueueStore(client: db.client, workerID: "test", logger: db.logger)
            let job = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('app', \(Self.payload), max_rate => 1000)"))
            let expansion = try #require(try await store.expandNextDueJob(chunkSize: 1000, includingSmallJobs: false))
            #expect(expansion.jobID == job && expansion.total == 1000)
            // The app's 400 a second wins over the job's 1,000: 40-token chunks 0.1 s apart, the last 2.4 s after the first.
            #expect(expansion.chunks == 25)
            #expect(try await db.scalar("SELECT round(throttle)::int8 FROM push.jobs WHERE id = \(job)") == 400)
            #expect(try await db.scalar("""
                SELECT round(1000 * extract(epoch FROM max(next_attempt_at) - min(next_attempt_at)))::int8 FROM push.chunks WHERE job_id = \(job)
                """) == 2400)
            #expect(try await db.scalar("SELECT max(estimated_tokens)::int8 FROM push.chunks WHERE job_id = \(job)") == 40)
            #expect(try await db.scalar("SELECT count(*) FROM push.job_progress WHERE job_id = \(job) AND estimated_finish_at IS NOT NULL") == 1)
            // A paced job of one token is expanded with the broadcasts, not as a small job.
            let single = try await db.scalar(PostgresQuery(unsafeSQL: """
                SELECT push.enqueue('app', \(Self.payload), tokens => ARRAY[lpad('1', 64, '0')], max_rate => 5)
                """))
            #expect(try await store.expandDueSmallJobs(chunkSize: 1000, limit: 10) == 0)
            let paced = try #require(try await store.expandNextDueJob(chunkSize: 1000, includingSmallJobs: false))
            #expect(paced.jobID == single && paced.total == 1)
        }
    }

    @Test func aLocalTimeBroadcastCostsPerZone() async throws {
        try await TestDatabase.with { db in
            try await db.createApp()
            try await db.exec("UPDATE push.apps SET default_timezone = 'Asia/Tokyo'")
            // 40 zones, 100 devices each, interleaved in key order; every tenth device of a zone has no zone of its own.
            try await db.exec("""
                INSERT INTO push.devices (app_id, token, timezone)
                SELECT 'app', lpad(to_hex(g), 64, '0'),
                       CASE WHEN g % 400 = 0 THEN NULL ELSE 'Etc/GMT' || CASE WHEN g % 40 < 20 THEN '-' ELSE '+' END || (g % 40 % 12 + 1) END
                  FROM generate_series(1, 4000) g
                """)
            let store = QueueStore(client: db.client, workerID: "test", logger: db.logger)
            let job = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('app', \(Self.payload), local_time => '09:00')"))
            let expansion = try #require(try await store.expandNextDueJob(chunkSize: 1000, includingSmallJobs: false))
            #expect(expansion.total == 4000)
            let zones = try await db.scalar("SELECT count(DISTINCT zone)::int8 FROM push.chunks WHERE job_id = \(job)")
            #expect(Int64(expansion.chunks) == zones, "one range per zone of at most 1,000 devices")
            // Each chunk's read returns exactly the devices of its zone that expansion counted there.
            let chunks = try await store.claimChunks(ClaimBudget(room: 100_000, maximumChunks: 100), lease: .seconds(30))
            #expect(chunks.isEmpty, "no zone's 09:00 is now")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.chunks c WHERE c.job_id = \(job)
                   AND c.next_attempt_at <> push.local_moment((SELECT send_at FROM push.jobs WHERE id = \(job)), c.zone, '09:00', NULL)
                """) == 0)
            #expect(try await db.scalar("SELECT waiting_tokens FROM push.job_progress WHERE job_id = \(job)") == 4000)
            #expect(try await db.scalar("SELECT cardinality(waiting_moments)::int8 FROM push.job_progress WHERE job_id = \(job)") == zones)
        }
    }

    @Test func frequencySlotsCountOnceAJobPerPersonAndAgeOutOfTheWindow() async throws {
        try await TestDatabase.with { db in
            try await db.createApp()
            try await db.exec(#"UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 2, "per": "1 hour"}}'"#)
            // Two devices of one user, one device without a user.
            try await db.exec("""
                INSERT INTO push.devices (app_id, token, user_id)
                VALUES ('app', repeat('a', 64), 'u1'), ('app', repeat('b', 64), 'u1'), ('app', repeat('c', 64), NULL)
                """)
            let store = QueueStore(client: db.client, workerID: "test", logger: db.logger)
            let cap = FrequencyCap(maximumJobs: 2, window: .seconds(3600))
            let (a, b, c) = (String(repeating: "a", count: 64), String(repeating: "b", count: 64), String(repeating: "c", count: 64))
            func take(_ job: Int64, _ tokens: [String]) async throws -> [String] {
                try await store.takeFrequencySlots(appID: "app", jobID: job, category: "marketing", cap: cap, tokens: tokens)
            }
            #expect(try await take(1, [a, c]) == [])
            // The user's second device in the same job: the job already counts for the user.
            #expect(try await take(1, [b]) == [])
            #expect(try await take(2, [a, b, c]) == [])
            // A third job: the user is capped on both devices, and so is the device alone.
            #expect(Set(try await take(3, [a, b, c])) == [a, b, c])
            // A job retried after its slot was taken keeps it.
            #expect(try await take(2, [a]) == [])
            #expect(try await db.scalar("SELECT count(*) FROM push.frequency_ledger") == 2)
            // Slots older than the window no longer count.
            try await db.exec("UPDATE push.frequency_ledger SET sent_at = ARRAY(SELECT s - interval '2 hours' FROM unnest(sent_at) s)")
            #expect(try await take(4, [a, c]) == [])
            #expect(try await db.scalar("SELECT max(cardinality(job_ids))::int8 FROM push.frequency_ledger") == 1)
            // Rows whose every slot is out of the window, or whose category is no longer capped, are forgotten.
            try await db.exec("UPDATE push.frequency_ledger SET sent_at = ARRAY[now() - interval '2 hours'] WHERE person = 'user:u1'")
            #expect(try await store.forgetExpiredFrequencySlots() == 1)
            try await db.exec("UPDATE push.apps SET frequency_caps = NULL")
            #expect(try await store.forgetExpiredFrequencySlots() == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.frequency_ledger") == 0)
        }
    }

    @Test func aZoneWhoseMomentComesAfterTheJobExpiresIsDueAtTheExpiry() async throws {
        try await TestDatabase.with { db in
            try await db.createApp()
            try await db.exec("""
                INSERT INTO push.devices (app_id, token, timezone)
                VALUES ('app', repeat('a', 64), 'Etc/GMT-1'), ('app', repeat('b', 64), 'Etc/GMT+1')
                """)
            let store = QueueStore(client: db.client, workerID: "test", logger: db.logger)
            // 30 minutes from now in UTC+1's wall clock is due then there; UTC-1's is 22.5 hours later, after the expiry.
            let job = try await db.scalar(PostgresQuery(unsafeSQL: """
                SELECT push.enqueue('app', \(Self.payload), expires_at => now() + interval '2 hours',
                                    local_time => ((now() AT TIME ZONE 'Etc/GMT-1') + interval '30 minutes')::time)
                """))
            _ = try #require(try await store.expandNextDueJob(chunkSize: 1000, includingSmallJobs: false))
            let dues = try await db.exec("""
                SELECT round(extract(epoch FROM c.next_attempt_at - j.created_at) / 60)::int8
                  FROM push.chunks c JOIN push.jobs j ON j.id = c.job_id WHERE c.job_id = \(job) ORDER BY 1
                """).map { try $0.decode(Int64.self) }
            #expect(dues == [30, 120])
        }
    }
}
