import Foundation
import PGPushCore
import PGPushTestSupport
import PostgresNIO
import Testing

@testable import PGPushStore

/// The five queue-upkeep tasks the maintenance leader runs, each its own statement (the worker runs each as its
/// own service): partitions, drained jobs, ended jobs' chunks, the answer window and dead workers.
@Suite(.database, .timeLimit(.minutes(2)))
struct QueueUpkeepTests {
    static func store(_ db: TestDatabase, worker: String = "leader") -> QueueStore {
        QueueStore(client: db.client, workerID: worker, logger: db.logger)
    }

    static let payload = #"'{"aps":{"alert":"hi"}}'"#

    static func enqueue(_ db: TestDatabase, token: Int) async throws -> Int64 {
        try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(payload), tokens => ARRAY['\(TestTokens.token(token))'])"))
    }

    static let dropDayTwo = PostgresQuery(unsafeSQL: """
        DO $$ BEGIN
            EXECUTE format('DROP TABLE push.%I', 'deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date + 2, 'YYYYMMDD'));
        END $$
        """)

    @Test func deliveryPartitionsAreMadeWhenADayIsMissingAndALockIsWaitedForAtMostTwoSeconds() async throws {
        try await TestDatabase.with { db in
            let store = Self.store(db)
            #expect(try await store.createDeliveryPartitions() == 0, "today and 3 days ahead exist")
            try await db.exec(Self.dropDayTwo)

            // An analyst's query holds push.deliveries: the task gives up after the lock timeout, without an error.
            let holder = try await db.connect(as: db.url.username)
            try await holder.query("BEGIN", logger: db.logger)
            try await holder.query("LOCK TABLE push.deliveries IN ACCESS SHARE MODE", logger: db.logger)
            let started = ContinuousClock.now
            #expect(try await store.createDeliveryPartitions() == 0)
            let waited = ContinuousClock.now - started
            #expect(waited >= .seconds(1.5) && waited < .seconds(10), "waited \(waited)")
            try await holder.query("ROLLBACK", logger: db.logger)
            try await holder.close()

            #expect(try await store.createDeliveryPartitions() == 29, "the missing day and days 4 to 31")
            #expect(try await store.createDeliveryPartitions() == 0)
        }
    }

    @Test func drainedJobsAreFinishedAndJobsWithChunksLeftAreNot() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let store = Self.store(db)
            let drained = try await Self.enqueue(db, token: 1)
            let waiting = try await Self.enqueue(db, token: 2)
            #expect(try await store.expandDueSmallJobs(chunkSize: 10, limit: 10) == 2)
            try await db.exec("DELETE FROM push.chunks WHERE job_id = \(drained)")
            try await db.exec("UPDATE push.jobs SET delivered = 1 WHERE id = \(drained)")

            #expect(try await store.finishDrainedJobs() == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(drained) AND state = 'done' AND finished_at IS NOT NULL") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(waiting) AND state = 'running'") == 1)
            #expect(try await store.finishDrainedJobs() == 0, "a finished job is not finished again")
        }
    }

    @Test func chunksOfEndedJobsNobodyHoldsAreDroppedAndCountedAsCancelled() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let store = Self.store(db)
            let unheld = try await Self.enqueue(db, token: 1)
            let held = try await Self.enqueue(db, token: 2)
            #expect(try await store.expandDueSmallJobs(chunkSize: 10, limit: 10) == 2)
            // Ended behind the queue's back (as by a cancel while a worker held the chunks).
            try await db.exec("UPDATE push.jobs SET state = 'cancelled', finished_at = now() WHERE id IN (\(unheld), \(held))")
            try await db.exec("UPDATE push.chunks SET locked_by = 'alive', locked_until = now() + interval '1 hour' WHERE job_id = \(held)")

            #expect(try await store.dropChunksOfEndedJobs() == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE job_id = \(unheld)") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE job_id = \(held)") == 1, "its holder may still write it")
            #expect(try await db.scalar("SELECT total FROM push.jobs WHERE id = \(unheld)") == 0)
            #expect(try await db.scalar("SELECT cancelled_tokens FROM push.jobs WHERE id = \(unheld)") == 1)
        }
    }

    @Test func theAnswerWindowKeepsSevenDays() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("""
                INSERT INTO push.app_answer_window (app_id, minute, answered, bad_device_tokens)
                VALUES ('a', date_trunc('minute', now()) - interval '8 days', 10, 1),
                       ('a', date_trunc('minute', now()) - interval '6 days', 10, 1),
                       ('a', date_trunc('minute', now()), 10, 1)
                """)
            #expect(try await Self.store(db).trimAnswerWindow() == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.app_answer_window") == 2)
        }
    }

    @Test func workersWhoseHeartbeatStoppedAreForgotten() async throws {
        try await TestDatabase.with { db in
            try await db.exec("""
                INSERT INTO push.workers (id, hostname, pid, heartbeat_at)
                VALUES ('dead', 'h', 1, now() - interval '2 minutes'), ('alive', 'h', 2, now() - interval '10 seconds')
                """)
            #expect(try await Self.store(db).removeDeadWorkers(silentFor: .seconds(60)) == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.workers WHERE id = 'alive'") == 1)
        }
    }

    @Test func onePassRunsAllFiveAndReportsWhatEachDid() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec(Self.dropDayTwo)
            try await db.exec("INSERT INTO push.workers (id, hostname, pid, heartbeat_at) VALUES ('dead', 'h', 1, now() - interval '2 minutes')")
            let job = try await Self.enqueue(db, token: 1)
            try await db.exec("UPDATE push.jobs SET state = 'running' WHERE id = \(job)")

            let report = try await Self.store(db).maintain(deadWorkerAfter: .seconds(60))
            #expect(report == QueueStore.MaintenanceReport(
                ranAsLeader: true, partitionsCreated: 29, jobsFinished: 1, workersRemoved: 1, chunksOfEndedJobsDropped: 0))
        }
    }
}

/// The job's final-state rule (``JobFinalState``), written once and applied by both paths that end a job: the
/// completion that writes a job's last chunk, and maintenance's backstop for drained jobs.
@Suite(.database, .timeLimit(.minutes(2)))
struct JobFinalStateTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var failureReason: String?
        var delivered: Int64 = 0
        var failed: Int64 = 0
        var expired: Int64 = 0
        var ends: String
        var testDescription: String {
            "reason \(failureReason ?? "none"), delivered \(delivered), failed \(failed), expired \(expired): \(ends)"
        }
    }

    static let cases: [Case] = [
        Case(ends: "done"),  // no outcome at all: every device was removed before it was sent
        Case(delivered: 5, ends: "done"),
        Case(delivered: 1, failed: 9, ends: "done"),
        Case(delivered: 2, expired: 3, ends: "done"),
        Case(failed: 3, ends: "failed"),
        Case(expired: 2, ends: "failed"),  // the job expired before anything got through
        Case(failed: 1, expired: 1, ends: "failed"),
        Case(failureReason: "InvalidPushType", ends: "failed"),
        Case(failureReason: "InvalidPushType", delivered: 4, failed: 6, ends: "failed"),  // a job-level error wins
    ]

    @Test(arguments: cases) func theRuleAsSQL(_ rule: Case) async throws {
        try await TestDatabase.with(migrate: false) { db in
            let rows = try await db.exec("""
                SELECT \(unescaped: JobFinalState.sql(ofJob: "j"))
                  FROM (VALUES (\(rule.failureReason)::text, \(rule.delivered)::int8, \(rule.failed)::int8, \(rule.expired)::int8))
                       AS j(failure_reason, delivered, failed, expired)
                """)
            #expect(try rows.first?.decode(String.self) == rule.ends)
        }
    }

    @Test func theRuleTakesAnyExpressions() {
        let sql = JobFinalState.sql(failureReason: "j.failure_reason", delivered: "j.delivered + d.delivered",
                                    failed: "j.failed + d.failed", expired: "j.expired + d.expired")
        #expect(sql.contains("(j.delivered + d.delivered) = 0"))
        #expect(sql.contains("(j.failed + d.failed) + (j.expired + d.expired) > 0"))
    }

    /// Every case through both paths: jobs whose counts are set, then ended by their last chunk's completion, and
    /// the same jobs with their chunks gone, ended by maintenance.
    @Test func theCompletionAndMaintenanceEndJobsAlike() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let store = QueueUpkeepTests.store(db, worker: "w1")
            var completed: [Int64: Case] = [:], drained: [Int64: Case] = [:]
            for (index, rule) in Self.cases.enumerated() {
                completed[try await QueueUpkeepTests.enqueue(db, token: 2 * index)] = rule
                drained[try await QueueUpkeepTests.enqueue(db, token: 2 * index + 1)] = rule
            }
            #expect(try await store.expandDueSmallJobs(chunkSize: 10, limit: 100) == 2 * Self.cases.count)
            for (job, rule) in completed.merging(drained, uniquingKeysWith: { a, _ in a }) {
                try await db.exec("""
                    UPDATE push.jobs SET failure_reason = \(rule.failureReason), delivered = \(rule.delivered),
                                         failed = \(rule.failed), expired = \(rule.expired)
                     WHERE id = \(job)
                    """)
            }
            try await db.exec("DELETE FROM push.chunks WHERE job_id = ANY (\(Array(drained.keys)))")
            let chunks = try await store.claimChunks(limit: 100, lease: .seconds(30))
            #expect(Set(chunks.map(\.jobID)) == Set(completed.keys))
            let report = try await store.complete(chunks.map { ChunkCompletion(chunk: $0) })
            #expect(report.jobsFinished == completed.count)
            #expect(try await store.finishDrainedJobs() == drained.count)

            for (job, rule) in completed {
                let state = try await db.exec("SELECT state FROM push.jobs WHERE id = \(job)").first?.decode(String.self)
                #expect(state == rule.ends, "completion, \(rule.testDescription)")
            }
            for (job, rule) in drained {
                let state = try await db.exec("SELECT state FROM push.jobs WHERE id = \(job)").first?.decode(String.self)
                #expect(state == rule.ends, "maintenance, \(rule.testDescription)")
            }
        }
    }
}
