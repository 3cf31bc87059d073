import Foundation
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// End to end: a broadcast's numbers add up while its audience changes under it. Each broadcast is slowed by
/// its app's rate limit and a 20 ms APNs round trip, and sent in ranges of 100 devices, so that the changes
/// land in key ranges the worker has not read yet (each test checks that they did).
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct AudienceChangeTests {
        // A worker reads a range when it starts the chunk, which may be claimed ahead of its turn: a small room keeps
        // the reads close to the sends, so that the changes land in ranges not read yet.
        static let slowBroadcast = ["--chunk-size", "100", "--max-in-flight", "200"]

        /// Per job, once every job has ended: total is the number of its rows in push.deliveries and the sum of
        /// its outcomes, no (job, token) has two outcomes, push.job_progress shows no gap, and
        /// push.delivery_stats agrees with push.jobs.
        static func expectCountsAddUp(_ fleet: Fleet) async throws {
            try await waitUntilEveryJobEnded(fleet)
            #expect(try await fleet.count("""
                SELECT count(*) FROM push.jobs j
                 WHERE j.total IS DISTINCT FROM (SELECT count(*) FROM push.deliveries d WHERE d.job_id = j.id)
                    OR j.total <> j.delivered + j.failed + j.expired
                """) == 0, "a job whose total is not its outcomes")
            #expect(try await fleet.count("SELECT count(*) FROM (SELECT 1 FROM push.deliveries GROUP BY job_id, token HAVING count(*) > 1) t") == 0,
                    "a token with two outcomes for one job")
            #expect(try await fleet.count("SELECT count(*) FROM push.job_progress WHERE total <> delivered + failed OR pending <> 0") == 0)
            #expect(try await fleet.count("SELECT coalesce(sum(count), 0)::int8 FROM push.delivery_stats")
                    == fleet.count("SELECT coalesce(sum(delivered + failed + expired), 0)::int8 FROM push.jobs"))
            #expect(try await fleet.count("SELECT coalesce(sum(count), 0)::int8 FROM push.delivery_stats WHERE status = 200")
                    == fleet.count("SELECT coalesce(sum(delivered), 0)::int8 FROM push.jobs"))
        }

        static func waitUntilEveryJobEnded(_ fleet: Fleet) async throws {
            let deadline = ContinuousClock.now + .seconds(120)
            while try await fleet.count("SELECT count(*) FROM push.jobs WHERE state IN ('queued', 'running')") > 0 {
                guard ContinuousClock.now < deadline else {
                    Issue.record("jobs still running after 120 s")
                    return
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }

        static func waitUntilSent(_ fleet: Fleet, job: Int64, atLeast tokens: Int64) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") < tokens {
                guard ContinuousClock.now < deadline else {
                    Issue.record("job \(job) did not send \(tokens) tokens within 60 s")
                    return
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }

        /// The job's audience corrections: (total, removed_before_send, added_before_send, cancelled_tokens).
        static func corrections(_ fleet: Fleet, job: Int64) async throws -> (Int64, Int64, Int64, Int64) {
            let rows = try await fleet.db.rows("""
                SELECT total, removed_before_send, added_before_send, cancelled_tokens FROM push.jobs WHERE id = \(job)
                """)
            for try await row in rows.decode((Int64, Int64, Int64, Int64).self) { return row }
            return (-1, -1, -1, -1)
        }

        /// The measured case of issue 31, scaled down: one-token jobs to users of the same app prune their dead
        /// devices (410 for `ff…`, 400 for `ee…`) while the broadcast still has to reach them.
        @Test func oneTokenJobsPruningTheBroadcastsDevicesLeaveEveryJobAddingUp() async throws {
            try await Fleet.with(configure: {
                $0.faults.latency = .fixed(.milliseconds(20))
                $0.registry.unregisteredPrefix = "ff"
                $0.registry.badDeviceTokenPrefix = "ee"
            }) { fleet in
                try await fleet.createApp(rateLimit: 500)
                try await fleet.registerDevices(3000)
                // Their users get one-token jobs; their tokens sort after every live one, into the last ranges.
                for prefix in ["ee", "ff"] {
                    try await fleet.db.exec(PostgresQuery(unsafeSQL: """
                        INSERT INTO push.devices (app_id, token, user_id, registered_at)
                        SELECT 'app', '\(prefix)' || lpad(to_hex(g), 62, '0'), '\(prefix)-user-' || g, now() - interval '2 days'
                          FROM generate_series(1, 100) g
                        """))
                }
                let broadcast = try await fleet.enqueue()
                let worker = try fleet.startWorker(Self.slowBroadcast)
                try await Self.waitUntilSent(fleet, job: broadcast, atLeast: 300)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(broadcast) AND token >= 'e'") == 0)

                // 200 one-token jobs a second, to the users of the dead devices and to live users alike.
                for batch in 0..<4 {
                    try await fleet.db.exec(PostgresQuery(unsafeSQL: """
                        SELECT push.enqueue('app', '{"aps":{"alert":"your order shipped"}}', user_ids => ARRAY[p || '-user-' || g], priority => 10)
                          FROM unnest(ARRAY['ee', 'ff']) p, generate_series(\(batch * 25 + 1), \(batch * 25 + 25)) g
                        """))
                    try await Task.sleep(for: .milliseconds(250))
                }
                try await fleet.db.exec("""
                    SELECT push.enqueue('app', '{"aps":{"alert":"hi"}}', tokens => ARRAY[lpad(to_hex(g), 64, '0')], priority => 10)
                      FROM generate_series(2900, 2999) g
                    """)
                // The 410s are pruned by maintenance while the broadcast is still on its way to them.
                let deadline = ContinuousClock.now + .seconds(30)
                while try await fleet.count("SELECT count(*) FROM push.pruned_devices WHERE token LIKE 'ff%'") < 100, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(broadcast) AND state = 'running'") == 1,
                        "the broadcast ended before the prunes: nothing changed under it")
                #expect(try await fleet.waitForJob(broadcast, timeout: .seconds(120)) == "done")
                try await Self.waitUntilEveryJobEnded(fleet)
                await worker.stop()

                try await Self.expectCountsAddUp(fleet)
                let (total, removed, added, cancelled) = try await Self.corrections(fleet, job: broadcast)
                // The broadcast's devices that were pruned before their range was read got no outcome from it,
                // and each is counted as removed; nothing joined.
                let prunedUnsent = try await fleet.count("""
                    SELECT count(*) FROM push.pruned_devices p
                     WHERE NOT EXISTS (SELECT 1 FROM push.deliveries d WHERE d.job_id = \(broadcast) AND d.token = p.token)
                    """)
                #expect(removed > 0, "no device was pruned before the broadcast read its range")
                #expect(removed == prunedUnsent)
                #expect(added == 0 && cancelled == 0)
                #expect(total == 3200 - removed)
                #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices WHERE token LIKE 'ff%'") == 100)
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id <> \(broadcast) AND total = 1") == 300)
            }
        }

        /// New devices and `replaces` land in ranges the broadcast has not read yet: a new device was not in the
        /// audience and is not sent; a replacement is the same device under a new token, and is.
        @Test func registrationsAndReplacementsIntoRangesNotYetSentAreCountedConsistently() async throws {
            try await Fleet.with(configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { fleet in
                try await fleet.createApp(rateLimit: 500)
                try await fleet.registerDevices(3000)
                // c0… 1–200: the last two ranges of 100, (#3000, #3100] and (#3100, ∞).
                try await fleet.registerDevices(200, prefix: "c0")
                let broadcast = try await fleet.enqueue()
                let worker = try fleet.startWorker(Self.slowBroadcast)
                try await Self.waitUntilSent(fleet, job: broadcast, atLeast: 300)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(broadcast) AND token >= 'c'") == 0)

                // 50 new devices (c1…), 50 devices of the first c0 range replaced by new tokens (c2…, into the
                // last range), and 50 live devices re-registered as themselves.
                try await fleet.db.exec("""
                    SELECT push.register_device('app', 'c1' || lpad(to_hex(g), 62, '0'), user_id => 'new-' || g) FROM generate_series(1, 50) g
                    """)
                try await fleet.db.exec("""
                    SELECT push.register_device('app', 'c2' || lpad(to_hex(g), 62, '0'), replaces => 'c0' || lpad(to_hex(g), 62, '0'))
                      FROM generate_series(1, 50) g
                    """)
                try await fleet.db.exec("SELECT push.register_device('app', lpad(to_hex(g), 64, '0')) FROM generate_series(2901, 2950) g")
                // Another broadcast enqueued now has them all in its audience.
                let later = try await fleet.enqueue()

                #expect(try await fleet.waitForJob(broadcast, timeout: .seconds(120)) == "done")
                #expect(try await fleet.waitForJob(later, timeout: .seconds(120)) == "done")
                await worker.stop()

                try await Self.expectCountsAddUp(fleet)
                func sent(_ job: Int64, _ prefix: String) async throws -> Int64 {
                    try await fleet.count(PostgresQuery(unsafeSQL: "SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND token LIKE '\(prefix)%'"))
                }
                #expect(try await sent(broadcast, "c1") == 0, "registered after the expansion: not in its audience")
                #expect(try await sent(broadcast, "c2") == 50, "each replacement was sent: its range was read after it")
                #expect(try await sent(broadcast, "c0") == 150)
                let (total, removed, added, cancelled) = try await Self.corrections(fleet, job: broadcast)
                #expect(total == 3200)
                #expect(removed == 50 && added == 50 && cancelled == 0)
                #expect(try await sent(later, "c1") == 50)
                #expect(try await sent(later, "c2") == 50)
                #expect(try await sent(later, "c0") == 150)
                #expect(try await fleet.count("SELECT total FROM push.jobs WHERE id = \(later)") == 3250)
            }
        }

        /// An operator deletes devices of ranges the broadcast has not read yet.
        @Test func anOperatorDeletingDevicesMidBroadcastLeavesItAddingUp() async throws {
            try await Fleet.with(configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { fleet in
                try await fleet.createApp(rateLimit: 500)
                try await fleet.registerDevices(3000)
                try await fleet.registerDevices(300, prefix: "b0")
                let broadcast = try await fleet.enqueue()
                let worker = try fleet.startWorker(Self.slowBroadcast)
                try await Self.waitUntilSent(fleet, job: broadcast, atLeast: 300)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(broadcast) AND token >= 'b'") == 0)
                // Every other device of the b0 ranges.
                let deleted = try await fleet.count("""
                    WITH gone AS (
                        DELETE FROM push.devices WHERE app_id = 'app' AND token LIKE 'b0%' AND ('x' || right(token, 1))::bit(4)::int % 2 = 0
                        RETURNING 1)
                    SELECT count(*) FROM gone
                    """)
                #expect(deleted == 150)
                #expect(try await fleet.waitForJob(broadcast, timeout: .seconds(120)) == "done")
                await worker.stop()

                try await Self.expectCountsAddUp(fleet)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(broadcast) AND token LIKE 'b0%'") == 150)
                let (total, removed, added, cancelled) = try await Self.corrections(fleet, job: broadcast)
                #expect(total == 3150 && removed == 150 && added == 0 && cancelled == 0)
            }
        }

        /// A cancel in the middle of a broadcast whose devices are being deleted: what was not sent leaves the
        /// total for `cancelled_tokens`.
        @Test func aCancelMidBroadcastEndsWithTheTotalOfItsOutcomes() async throws {
            try await Fleet.with(configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { fleet in
                try await fleet.createApp(rateLimit: 500)
                try await fleet.registerDevices(3000)
                let broadcast = try await fleet.enqueue()
                let worker = try fleet.startWorker(Self.slowBroadcast)
                try await Self.waitUntilSent(fleet, job: broadcast, atLeast: 300)
                try await fleet.db.exec("DELETE FROM push.devices WHERE token > lpad(to_hex(2800), 64, '0')")
                #expect(try await fleet.count("SELECT push.cancel(\(broadcast))::int::int8") == 1)
                // The chunks in flight end and maintenance drops the rest.
                try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                    try await fleet.count("SELECT count(*) FROM push.chunks") == 0
                }
                await worker.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks") == 0)
                try await Self.expectCountsAddUp(fleet)
                let (total, removed, added, cancelled) = try await Self.corrections(fleet, job: broadcast)
                #expect(total < 3000 && cancelled > 0 && added == 0)
                #expect(total + removed + cancelled == 3000, "every device of the audience is accounted for once")
            }
        }
    }
}
