import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

extension EndToEndTests {
    /// Issue 46's controls, end to end: worker processes, the APNs simulator over TLS, a real PostgreSQL.
    @Suite(.timeLimit(.minutes(5)))
    struct BroadcastControlsTests {
        /// Registers `count` devices in `zone` (nil: the app's default), tokens `<prefix>…`, optionally each with
        /// a user id `<userPrefix><n>`.
        static func registerDevices(
            _ fleet: Fleet, _ count: Int, prefix: String, zone: String?, userPrefix: String? = nil, firstUser: Int = 1
        ) async throws {
            try await fleet.db.exec("""
                INSERT INTO push.devices (app_id, token, timezone, user_id, registered_at)
                SELECT 'app', \(prefix) || lpad(to_hex(g), 64 - length(\(prefix)), '0'), \(zone),
                       \(userPrefix) || (g - 1 + \(firstUser)), now() - interval '1 day'
                  FROM generate_series(1, \(count)) g
                """)
        }

        static func seconds(_ fleet: Fleet, _ query: PostgresQuery) async throws -> Double {
            for try await value in try await fleet.db.rows(query).decode(Double.self) { return value }
            return .nan
        }

        /// Seconds from the job's enqueue to its finish.
        static func duration(_ fleet: Fleet, job: Int64) async throws -> Double {
            try await seconds(fleet, "SELECT extract(epoch FROM finished_at - created_at)::float8 FROM push.jobs WHERE id = \(job)")
        }

        @Test(arguments: [1, 2])
        func throttledRolloutKeepsItsRateAndLetsAOneTokenJobThrough(workers: Int) async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(1500)
                try await fleet.registerDevices(1, prefix: "f")
                let started = (0..<workers).map { _ in try? fleet.startWorker() }.compactMap { $0 }
                try await Task.sleep(for: .seconds(2))
                let broadcast = try await fleet.enqueue(", max_rate => 250")
                let single = try await fleet.enqueue(", tokens => ARRAY['f' || lpad('1', 63, '0')]")
                #expect(try await fleet.waitForJob(single, timeout: .seconds(10)) == "done")
                #expect(try await fleet.waitForJob(broadcast, timeout: .seconds(60)) == "done")
                for worker in started { await worker.stop() }
                let singleTook = try await Self.duration(fleet, job: single)
                #expect(singleTook < 1.0, "the one-token job took \(singleTook) s beside the throttled broadcast")
                let took = try await Self.duration(fleet, job: broadcast)
                let timeline = try await fleet.db.exec("""
                    SELECT format('started %s, first sent %s, last sent %s, finished %s s after the enqueue',
                                  round(extract(epoch FROM j.started_at - j.created_at), 2),
                                  round(extract(epoch FROM min(d.sent_at) - j.created_at), 2),
                                  round(extract(epoch FROM max(d.sent_at) - j.created_at), 2),
                                  round(extract(epoch FROM j.finished_at - j.created_at), 2))
                      FROM push.jobs j JOIN push.deliveries d ON d.job_id = j.id WHERE j.id = \(broadcast)
                     GROUP BY j.id
                    """).first?.decode(String.self) ?? ""
                // Issue 46's 6,000 at 1,000 a second, scaled to what a debug build of the worker and the simulator
                // sustain on two cores (about 550 a second): 1,501 at 250 a second, the last tenth-of-a-second chunk
                // due 5.9 s after the start.
                #expect(took >= 5.5 && took < 7.5, "1,501 tokens at max_rate 250 took \(took) s with \(workers) worker(s): \(timeline)")
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(broadcast)") == 1501)
                // By any moment t after the start, at most 250·t tokens (plus a chunk) went out. An outcome is
                // stamped when its answer arrives, after its send, so answers a busy simulator holds back and
                // hands over together can only make the count lower, never break the bound.
                let ahead = try await fleet.count("""
                    SELECT max(n - 250 * s)::int8 FROM (
                        SELECT extract(epoch FROM d.sent_at - j.started_at) AS s,
                               row_number() OVER (ORDER BY d.sent_at) AS n
                          FROM push.deliveries d JOIN push.jobs j ON j.id = d.job_id
                         WHERE d.job_id = \(broadcast)) t
                    """)
                #expect(ahead <= 50, "\(ahead) tokens ahead of 250 a second")
                #expect(try await fleet.count("SELECT round(throttle)::int8 FROM push.jobs WHERE id = \(broadcast)") == 250)
            }
        }

        @Test func spreadOverSetsTheRateFromTheAudienceAndTheAppLimitWinsWhenLower() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp(rateLimit: 500)
                try await fleet.registerDevices(3000)
                let spread = try await fleet.enqueue(", spread_over => interval '3 seconds'")
                let worker = try fleet.startWorker()
                #expect(try await fleet.waitForJob(spread, timeout: .seconds(60)) == "done")
                await worker.stop()
                // 3,000 over 3 s is 1,000 a second; the app's 500 wins: about 6 s.
                #expect(try await fleet.count("SELECT round(throttle)::int8 FROM push.jobs WHERE id = \(spread)") == 500)
                let took = try await Self.duration(fleet, job: spread)
                #expect(took >= 5.0, "3,000 tokens at the app's 500 a second took \(took) s")
            }
        }

        @Test func localTimeSendsEachZoneAtItsOwnMomentAndACancelEndsTheRest() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await Self.registerDevices(fleet, 50, prefix: "a", zone: "UTC")
                try await Self.registerDevices(fleet, 40, prefix: "b", zone: "Etc/GMT-1")
                try await Self.registerDevices(fleet, 30, prefix: "c", zone: "Etc/GMT+1")
                // Six seconds ahead of UTC's wall clock (the contract takes any time of day, to the second).
                let job = try await fleet.db.scalar("""
                    SELECT push.enqueue('app', '{"aps":{"alert":"nine o''clock"}}',
                                        local_time => ((now() AT TIME ZONE 'UTC') + interval '6 seconds')::time)
                    """)
                let worker = try fleet.startWorker()
                let deadline = ContinuousClock.now + .seconds(40)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 50, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(250))
                }
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 50)
                #expect(try await fleet.count("""
                    SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status = 200 AND token LIKE 'a%'
                    """) == 50)
                #expect(try await fleet.count("SELECT waiting_tokens FROM push.job_progress WHERE job_id = \(job)") == 70)
                // The moments still to come: Etc/GMT+1 (UTC-1) an hour after UTC's, Etc/GMT-1 (UTC+1) 23 hours after.
                let zones = try await fleet.db.exec("""
                    SELECT z, round(extract(epoch FROM m - j.created_at) / 60)::int8
                      FROM push.job_progress p, push.jobs j, unnest(p.waiting_zones, p.waiting_moments) AS w(z, m)
                     WHERE p.job_id = \(job) AND j.id = p.job_id ORDER BY m
                    """).map { try $0.decode((String, Int64).self) }
                #expect(zones.map(\.0) == ["Etc/GMT+1", "Etc/GMT-1"])
                #expect(zones.map(\.1) == [60, 23 * 60], "minutes ahead: \(zones)")
                #expect(try await fleet.count("""
                    SELECT count(*) FROM push.job_progress WHERE job_id = \(job) AND estimated_finish_at > now() + interval '22 hours'
                    """) == 1)
                #expect(try await fleet.count("SELECT push.cancel(\(job))::int::int8") == 1)
                await worker.stop()
                #expect(try await fleet.count("SELECT cancelled_tokens FROM push.jobs WHERE id = \(job)") == 70)
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE job_id = \(job)") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'cancelled'") == 1)
                #expect(fleet.simulator.ledger.acceptedCount == 50)
            }
        }

        @Test func quietHoursHoldAZoneInsideTheWindowButNotTheUrgentLane() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                // A two-hour window around UTC's wall clock: UTC is inside it, UTC+12 is not.
                try await fleet.db.exec("""
                    UPDATE push.apps
                       SET quiet_hours = to_char((now() AT TIME ZONE 'UTC') - interval '1 hour', 'HH24:MI') || '-'
                                         || to_char((now() AT TIME ZONE 'UTC') + interval '1 hour', 'HH24:MI')
                     WHERE id = 'app'
                    """)
                try await Self.registerDevices(fleet, 40, prefix: "a", zone: nil)
                try await Self.registerDevices(fleet, 30, prefix: "b", zone: "Etc/GMT-12")
                let worker = try fleet.startWorker()
                let broadcast = try await fleet.enqueue()
                let urgent = try await fleet.enqueue(", tokens => ARRAY['a' || lpad('1', 63, '0')], priority => 10")
                #expect(try await fleet.waitForJob(urgent, timeout: .seconds(10)) == "done")
                let deadline = ContinuousClock.now + .seconds(30)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(broadcast)") < 30, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(250))
                }
                try await Task.sleep(for: .seconds(1))
                await worker.stop()
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(broadcast)") == 30)
                #expect(try await fleet.count("""
                    SELECT count(*) FROM push.deliveries WHERE job_id = \(broadcast) AND token LIKE 'a%'
                    """) == 0)
                #expect(try await fleet.count("SELECT waiting_tokens FROM push.job_progress WHERE job_id = \(broadcast)") == 40)
                #expect(try await fleet.count("SELECT (state = 'running')::int::int8 FROM push.jobs WHERE id = \(broadcast)") == 1)
                #expect(try await fleet.count("""
                    SELECT count(*) FROM push.deliveries WHERE job_id = \(urgent) AND status = 200
                    """) == 1)
            }
        }

        @Test func frequencyCapsHoldPerPersonAcrossTwoWorkers() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.db.exec("""
                    UPDATE push.apps SET frequency_caps = '{"marketing": {"max": 2, "per": "24 hours"}}' WHERE id = 'app'
                    """)
                // 100 users; the first 20 have a second device.
                try await Self.registerDevices(fleet, 100, prefix: "a", zone: nil, userPrefix: "user-")
                try await Self.registerDevices(fleet, 20, prefix: "b", zone: nil, userPrefix: "user-")
                let workers = [try fleet.startWorker(), try fleet.startWorker()]
                var marketing: [Int64] = []
                for _ in 0..<3 { marketing.append(try await fleet.enqueue(", category => 'marketing'")) }
                let news = try await fleet.enqueue(", category => 'news'")
                for job in marketing + [news] { #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "done") }
                for worker in workers { await worker.stop() }
                let ids = marketing.map(String.init).joined(separator: ",")
                // Each user got exactly two of the three, on every device; the third is capped on every device.
                #expect(try await fleet.count(PostgresQuery(unsafeSQL: """
                    SELECT count(*) FROM (
                        SELECT d.user_id, count(DISTINCT o.job_id) AS jobs FROM push.deliveries o
                          JOIN push.devices d ON d.app_id = o.app_id AND d.token = o.token
                         WHERE o.job_id IN (\(ids)) AND o.status = 200 GROUP BY d.user_id) s WHERE jobs = 2
                    """)) == 100)
                #expect(try await fleet.count(PostgresQuery(unsafeSQL: """
                    SELECT count(*) FROM push.deliveries WHERE job_id IN (\(ids)) AND status = 200
                    """)) == 240)
                #expect(try await fleet.count(PostgresQuery(unsafeSQL: """
                    SELECT count(*) FROM push.deliveries WHERE job_id IN (\(ids)) AND status = 0 AND reason = 'FrequencyCapped'
                    """)) == 120)
                #expect(try await fleet.count(PostgresQuery(unsafeSQL: """
                    SELECT sum(capped)::int8 FROM push.jobs WHERE id IN (\(ids))
                    """)) == 120)
                #expect(try await fleet.count(PostgresQuery(unsafeSQL: """
                    SELECT count(*) FROM push.jobs WHERE id IN (\(ids)) AND total = delivered + failed + expired + capped
                       AND failed = 0 AND state = 'done'
                    """)) == 3)
                #expect(try await fleet.count(PostgresQuery(unsafeSQL: """
                    SELECT sum(capped)::int8 FROM push.job_progress WHERE job_id IN (\(ids))
                    """)) == 120)
                #expect(try await fleet.count("""
                    SELECT coalesce(sum(capped), 0)::int8 FROM push.delivery_stats WHERE app_id = 'app' AND reason = 'FrequencyCapped'
                    """) == 120)
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(news)") == 120)
                #expect(fleet.simulator.ledger.acceptedCount == 240 + 120)
            }
        }
    }
}
