import Foundation
import PGPushDispatcher
import PGPushSimulator
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The worker's own services run inside the test process, against real PostgreSQL and the simulator over TLS:
/// a shutdown, a cancel, a pause, a lost lease and an expiry, observed through the database while they
/// happen. Nothing sleeps for a fixed time to let something happen; each step waits on a condition.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(3)))
    struct WorkerInProcessTests {
        /// Slow enough answers that a broadcast is still sending when the test acts on it.
        static func slowAnswers(_ configuration: inout APNsSimulatorConfiguration) {
            configuration.faults.latency = .fixed(.milliseconds(20))
        }

        @Test func aGracefulShutdownMidBroadcastEndsWithinGraceAndAnotherWorkerFinishesExactlyOnce() async throws {
            try await Fleet.with(configure: Self.slowAnswers) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(20_000)
                let job = try await fleet.enqueue()
                let took = try await fleet.withWorker(id: "first", configure: { $0.gracePeriod = .seconds(10) }) { _ in
                    _ = try await fleet.waitUntil("SELECT delivered FROM push.jobs WHERE id = \(job)") { $0 >= 2000 }
                }
                #expect(took < .seconds(11), "the shutdown took \(took), beyond its grace period")
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE locked_by LIKE 'first#%'") == 0,
                        "what was not sent went back to the queue")
                #expect(try await fleet.count("SELECT count(*) FROM push.workers WHERE id = 'first'") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.leader_leases WHERE holder LIKE 'first%'") == 0,
                        "the maintenance lease was handed back")
                let sentBefore = try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)")
                #expect(sentBefore < 20_000, "the shutdown came mid-broadcast")

                try await fleet.withWorker(id: "second") { _ in
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'done'", timeout: .seconds(120)) { $0 == 1 }
                }
                try await EndToEndTests.BroadcastTests.expectExactlyOnce(fleet, job: job, tokens: 20_000)
            }
        }

        @Test func aJobCancelledMidChunkStopsSendingAndTheWorkerGoesOn() async throws {
            try await Fleet.with(configure: Self.slowAnswers) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(20_000)
                let job = try await fleet.enqueue()
                try await fleet.withWorker { _ in
                    _ = try await fleet.waitUntil("SELECT delivered FROM push.jobs WHERE id = \(job)") { $0 >= 500 }
                    _ = try await fleet.count("SELECT count(*) FROM push.cancel(\(job)) WHERE true")
                    // The chunks in flight stop at their next token; nothing of the job stays claimed.
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.chunks WHERE job_id = \(job) AND locked_by IS NOT NULL") { $0 == 0 }
                    let stopped = try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)")
                    #expect(stopped < 20_000, "the cancel stopped the broadcast")
                    #expect(fleet.simulator.ledger.acceptedCount <= Int(stopped) + 5_000,
                            "no more than the chunks in flight were sent after the cancel")

                    let next = try await fleet.enqueue(", user_ids => NULL, tokens => ARRAY['\(String(repeating: "ab", count: 32))']")
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.jobs WHERE id = \(next) AND state IN ('done', 'failed')") { $0 == 1 }
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'cancelled'") == 1)
            }
        }

        @Test func aPausedAppSendsNothingAndItsJobFinishesOnceResumed() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(200)
                try await fleet.db.exec("UPDATE push.apps SET paused_reason = 'maintenance window', paused_at = now() WHERE id = 'app'")
                let job = try await fleet.enqueue()
                try await fleet.withWorker { running in
                    // Once the worker has turned its claim loop several times, it has had every chance to send.
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.workers") { $0 == 1 }
                    let turned = ContinuousClock.now
                    while ContinuousClock.now - turned < .seconds(2) { try await Task.sleep(for: .milliseconds(100)) }
                    #expect(fleet.simulator.statistics.requestsTotal == 0, "a paused app sends nothing")
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 0)
                    #expect(running.worker.isReady)

                    try await fleet.db.exec("UPDATE push.apps SET paused_reason = NULL, paused_at = NULL WHERE id = 'app'")
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'done'") { $0 == 1 }
                }
                try await EndToEndTests.BroadcastTests.expectExactlyOnce(fleet, job: job, tokens: 200)
            }
        }

        @Test func aChunkWhoseLeaseWasTakenIsRecordedOnlyByItsNewHolder() async throws {
            try await Fleet.with(configure: Self.slowAnswers) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(5_000)
                let job = try await fleet.enqueue()
                try await fleet.withWorker(id: "loser") { _ in
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.chunks WHERE job_id = \(job) AND locked_by LIKE 'loser#%'") { $0 > 0 }
                    // Another worker took the chunks over (as after an expired lease): the loser's outcomes for them
                    // must not be written; the chunks come back to the queue when the thief's short lease runs out.
                    let stolen = try await fleet.count("""
                        WITH stolen AS (UPDATE push.chunks SET locked_by = 'thief#0', locked_until = now() + interval '3 seconds'
                                         WHERE job_id = \(job) AND locked_by LIKE 'loser#%' RETURNING 1)
                        SELECT count(*) FROM stolen
                        """)
                    #expect(stolen > 0)
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'done'", timeout: .seconds(120)) { $0 == 1 }
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 5_000,
                        "one outcome per token although some were sent twice")
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 5_000)
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 5_000)
            }
        }

        /// A chunk whose holders kept dying (a payload that crashes the process, say) is claimed once more than
        /// `maximumClaims` allows: its tokens are recorded failed with `LeaseExpired` and never sent, so it cannot
        /// take the next worker down too. The job's other chunks are sent as usual.
        @Test func aChunkClaimedTooOftenIsRecordedLeaseExpiredAndNeverSent() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(600)
                let job = try await fleet.enqueue()
                let store = QueueStore(client: fleet.db.client, workerID: "setup", logger: fleet.db.logger)
                #expect(try await store.expandNextDueJob(chunkSize: 100)?.jobID == job)
                // Two of its six chunks were claimed as often as allowed, the last holder died, and its lease ran out.
                let poisoned = try await fleet.count("""
                    WITH dead AS (
                        UPDATE push.chunks SET claims = 5, locked_by = 'crashed#1', locked_until = now() - interval '1 second'
                         WHERE job_id = \(job) AND seq IN (0, 1) RETURNING estimated_tokens)
                    SELECT sum(estimated_tokens)::int8 FROM dead
                    """)
                #expect(poisoned == 200)
                try await fleet.withWorker(configure: { $0.maximumClaims = 5 }) { _ in
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state IN ('done', 'failed')") { $0 == 1 }
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status = 0 AND reason = 'LeaseExpired'") == 200)
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 600)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 600)
                #expect(try await fleet.count("SELECT failed FROM push.job_progress WHERE job_id = \(job)") == 200)
                #expect(fleet.simulator.ledger.acceptedCount == 400, "only the healthy chunks were sent")
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE job_id = \(job)") == 0)
            }
        }

        @Test func tokensPastTheirExpiryAreRecordedExpiredAndNeverSent() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(300)
                let job = try await fleet.enqueue(", expires_at => now() + interval '1 second'")
                // Expired before any worker saw it.
                _ = try await fleet.waitUntil("SELECT count(*) FROM push.jobs WHERE id = \(job) AND expires_at < now()") { $0 == 1 }
                try await fleet.withWorker { _ in
                    _ = try await fleet.waitUntil("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'failed'") { $0 == 1 }
                }
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status = 0 AND reason = 'Expired'") == 300)
                #expect(try await fleet.count("SELECT failed FROM push.job_progress WHERE job_id = \(job)") == 300)
                #expect(fleet.simulator.statistics.requestsTotal == 0)
            }
        }
    }
}
