import Foundation
import Logging
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The SQL behind the notification scheduler: batch expansion of small jobs, claims sized in notifications,
/// per-app allowances, process-owned leases and group-committed completions.
@Suite(.database, .timeLimit(.minutes(3)))
struct SchedulerQueueTests {
    static func store(_ db: TestDatabase, worker: String = "w1") -> QueueStore {
        QueueStore(client: db.client, workerID: worker, logger: db.logger)
    }

    static let payload = #"'{"aps":{"alert":"hi"}}'"#

    @Test func smallJobsExpandInOneStatementAndBroadcastsAreLeftAlone() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for i in 0..<6 {
                // u0 and u1 have two devices each, u2 one; u9 has none.
                try await db.exec("SELECT push.register_device('a', \(TestTokens.token(i)), user_id => \("u\(i % 3)"))")
            }
            let broadcast = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload))"))
            var users: [Int64] = []
            for user in ["u0", "u1", "u2", "u9"] {
                users.append(try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), user_ids => '{\(user)}')")))
            }
            let explicit = try await db.scalar(PostgresQuery(unsafeSQL:
                "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(50))', '\(TestTokens.token(51))'])"))
            let store = Self.store(db)
            let before = store.statementsExecuted
            #expect(try await store.expandDueSmallJobs(chunkSize: 1000, limit: 100) == 5)
            #expect(store.statementsExecuted - before == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(broadcast) AND state = 'queued'") == 1)
            let rows = try await db.rows("SELECT id, state, total FROM push.jobs WHERE id <> \(broadcast) ORDER BY id")
            var seen: [Int64: (String, Int64)] = [:]
            for try await (id, state, total) in rows.decode((Int64, String, Int64).self) { seen[id] = (state, total) }
            #expect(seen[users[0]]! == ("running", 2))
            #expect(seen[users[2]]! == ("running", 2))
            #expect(seen[users[3]]! == ("done", 0), "a user without devices has nothing to send")
            #expect(seen[explicit]! == ("running", 2))
            // One 'tokens' chunk per job, holding exactly its audience.
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE kind = 'tokens'") == 4)
            #expect(try await db.scalar("SELECT sum(cardinality(tokens))::int8 FROM push.chunks") == 2 + 2 + 2 + 2)
            #expect(try await store.expandDueSmallJobs(chunkSize: 1000, limit: 100) == 0)
        }
    }

    @Test func aSmallJobOverTheChunkSizeSplitsIntoChunks() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let tokens = (0..<7).map { "'\(TestTokens.token($0))'" }.joined(separator: ",")
            _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY[\(tokens)])"))
            let store = Self.store(db)
            #expect(try await store.expandDueSmallJobs(chunkSize: 3, limit: 10) == 0, "7 tokens is not a small job at chunk size 3")
            #expect(try await store.expandDueSmallJobs(chunkSize: 7, limit: 10) == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 1)
        }
    }

    /// The worker's look for a broadcast leaves one-user jobs to the batch, even older and more urgent ones:
    /// taken there, such a job became a key range, read again from the devices at send time.
    @Test func theLookForABroadcastLeavesSmallJobsToTheBatch() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for i in 0..<20 {
                try await db.exec("SELECT push.register_device('a', \(TestTokens.token(i)), user_id => \("u\(i)"))")
            }
            let user = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), user_ids => '{u1}', priority => 10)"))
            let explicit = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(2))'], priority => 10)"))
            let broadcast = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload))"))
            let store = Self.store(db)
            #expect(try await store.expandNextDueJob(chunkSize: 10, includingSmallJobs: false)?.jobID == broadcast)
            #expect(try await store.expandNextDueJob(chunkSize: 10, includingSmallJobs: false) == nil)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id IN (\(user), \(explicit)) AND state = 'queued'") == 2)
            #expect(try await store.expandDueSmallJobs(chunkSize: 10, limit: 100) == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE job_id IN (\(user), \(explicit)) AND kind = 'tokens'") == 2)
        }
    }

    /// The look reads only jobs of more than one entry (the `jobs_due_beyond_one` index): lists longer than the
    /// chunk size are found there, in priority order, and lists of one are always left to the batch.
    @Test func theLookForABroadcastFindsListsLongerThanAChunk() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for i in 0..<6 {
                try await db.exec("SELECT push.register_device('a', \(TestTokens.token(i)), user_id => \("u\(i)"))")
            }
            let tokens = (0..<3).map { "'\(TestTokens.token($0))'" }.joined(separator: ",")
            let oneToken = try await db.scalar(PostgresQuery(unsafeSQL:
                "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(4))'], priority => 10)"))
            let threeTokens = try await db.scalar(PostgresQuery(unsafeSQL:
                "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY[\(tokens)], priority => 5)"))
            let threeUsers = try await db.scalar(PostgresQuery(unsafeSQL:
                "SELECT push.enqueue('a', \(Self.payload), user_ids => '{u0,u1,u2}', priority => 7)"))
            let store = Self.store(db)
            #expect(try await store.expandNextDueJob(chunkSize: 3, includingSmallJobs: false) == nil, "three entries fit a chunk of three")
            #expect(try await store.expandNextDueJob(chunkSize: 2, includingSmallJobs: false)?.jobID == threeUsers)
            #expect(try await store.expandNextDueJob(chunkSize: 2, includingSmallJobs: false)?.jobID == threeTokens)
            #expect(try await store.expandNextDueJob(chunkSize: 2, includingSmallJobs: false) == nil)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(oneToken) AND state = 'queued'") == 1)
            #expect(try await store.expandNextDueJob(chunkSize: 2)?.jobID == oneToken, "the look that includes small jobs still sees it")
        }
    }

    @Test func aClaimIsSizedInNotificationsNotChunks() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 50) g")
            _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload))"))
            let store = Self.store(db)
            _ = try await store.expandNextDueJob(chunkSize: 10)
            for i in 0..<20 {
                _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(100 + i))'])"))
            }
            _ = try await store.expandDueSmallJobs(chunkSize: 10, limit: 100)
            // Order: the broadcast's chunk 0 (10 tokens), then the twenty one-token jobs (all chunk 0); room 25
            // takes the broadcast chunk and fifteen one-token jobs.
            let claimed = try await store.claimChunks(ClaimBudget(room: 25, maximumChunks: 100), lease: .seconds(30))
            #expect(claimed.count == 16)
            #expect(claimed.reduce(0) { $0 + $1.estimatedTokens } == 25)
            #expect(claimed.allSatisfy { $0.seq == 0 })
            // A chunk larger than the whole room is still claimed when it comes first: the room may be overshot
            // by one chunk, or a small room would never fit a broadcast.
            let next = try await store.claimChunks(ClaimBudget(room: 3, maximumChunks: 100), lease: .seconds(30))
            #expect(next.map(\.estimatedTokens) == [1, 1, 1])
            let big = try await store.claimChunks(ClaimBudget(room: 1, maximumChunks: 100), lease: .seconds(30))
            #expect(big.count == 1)
        }
    }

    @Test func aFastLaneClaimTakesSmallChunksOnlyAndLeavesTheBroadcastsAlone() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 50) g")
            // The broadcast outranks the small jobs, and its chunks would come first in an ordinary claim.
            _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), priority => 5)"))
            let store = Self.store(db)
            _ = try await store.expandNextDueJob(chunkSize: 10)
            for i in 0..<3 {
                _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(100 + i))'])"))
            }
            _ = try await store.expandDueSmallJobs(chunkSize: 10, limit: 100)
            let fastLane = try await store.claimChunks(ClaimBudget(room: 100, maximumChunks: 100, maximumChunkTokens: 5), lease: .seconds(30))
            #expect(fastLane.map(\.estimatedTokens) == [1, 1, 1])
            #expect(fastLane.allSatisfy { $0.job.userIDs == nil && $0.priority == 0 })
            let ordinary = try await store.claimChunks(ClaimBudget(room: 100, maximumChunks: 100), lease: .seconds(30))
            #expect(ordinary.count == 5, "the broadcast's five 10-token chunks are still there")
        }
    }

    /// The ordinary life of a transactional app: statistics gathered while every job was done, then a burst of
    /// one-user jobs. A claim whose plan trusted those statistics re-sorted its candidates once per active job
    /// (15 s per claim at 20,000 jobs); one that names the row versions it locked does not care.
    @Test(.timeLimit(.minutes(2)))
    func aBurstAfterStatisticsSawOnlyFinishedJobsIsClaimedAtOnce() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec(PostgresQuery(unsafeSQL: """
                SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY[lpad(to_hex(g), 64, '0')])
                  FROM generate_series(1, 2000) g
                """))
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 1, finished_at = now()")
            try await db.exec("ANALYZE push.jobs")
            try await db.exec("ANALYZE push.chunks")
            try await db.exec(PostgresQuery(unsafeSQL: """
                SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY[lpad(to_hex(g), 64, '0')])
                  FROM generate_series(10001, 18000) g
                """))
            let store = Self.store(db)
            var expanded = 0
            while true {
                let made = try await store.expandDueSmallJobs(chunkSize: 1000, limit: 1000)
                if made == 0 { break }
                expanded += made
            }
            #expect(expanded == 8000)
            let started = ContinuousClock.now
            let claimed = try await store.claimChunks(ClaimBudget(room: 1000, maximumChunks: 1000), lease: .seconds(30))
            let took = ContinuousClock.now - started
            #expect(claimed.count == 1000)
            #expect(Set(claimed.map(\.jobID)).count == 1000)
            #expect(claimed.allSatisfy { $0.tokens.count == 1 && !$0.job.payload.isEmpty })
            // Typically a few tens of milliseconds; the re-sorting plan took 6 s on the same data.
            #expect(took < .seconds(3), "the claim took \(took)")
        }
    }

    @Test(.timeLimit(.minutes(2)))
    func writesAndMaintenanceStayQuickAfterStatisticsSawOnlyABroadcastsChunks() async throws {
        try await TestDatabase.with { db in
            // Autovacuum analyzes the queue while it holds one broadcast's chunks, beside finished jobs: to the
            // planner every chunk then belongs to one job, and hardly any job runs. Then a burst of one-user jobs
            // runs: 20,000 chunks, 20,000 running jobs.
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', 'b' || lpad(to_hex(g), 63, '0') FROM generate_series(1, 4000) g")
            try await db.exec(PostgresQuery(unsafeSQL: """
                SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY[lpad(to_hex(g), 64, '0')])
                  FROM generate_series(100001, 102000) g
                """))
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 1, finished_at = now()")
            _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload))"))
            let broadcast = try #require(try await Self.store(db).expandNextDueJob(chunkSize: 10))
            #expect(broadcast.chunks == 400)
            try await db.exec("ANALYZE push.jobs")
            try await db.exec("ANALYZE push.chunks")
            try await db.exec(PostgresQuery(unsafeSQL: """
                SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY[lpad(to_hex(g), 64, '0')], priority => 5)
                  FROM generate_series(1, 20000) g
                """))
            let store = Self.store(db)
            while try await store.expandDueSmallJobs(chunkSize: 1000, limit: 5000) > 0 {}
            let claimed = try await store.claimChunks(ClaimBudget(room: 1000, maximumChunks: 1000), lease: .seconds(30))
            #expect(claimed.count == 1000)

            let now = Date()
            let completions = claimed.map { chunk in
                ChunkCompletion(chunk: chunk, outcomes: chunk.tokens.map {
                    FinalOutcome(token: $0, status: 200, reason: nil, deliveryID: DeliveryID.make(jobID: chunk.jobID, token: $0),
                                 attempt: 1, sentAt: now)
                }, answered: chunk.tokens.count)
            }
            var started = ContinuousClock.now
            let report = try await store.complete(completions)
            let write = ContinuousClock.now - started
            #expect(report.jobsFinished == 1000)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state = 'done'") == 3000)

            started = ContinuousClock.now
            let maintenance = try await store.maintain(deadWorkerAfter: .seconds(60))
            let pass = ContinuousClock.now - started
            #expect(maintenance.jobsFinished == 0, "every running job still has its chunk")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state = 'running'") == 19001)
            // The write takes about 0.2 s here. Probing the queue once per job made it a sequential scan of every
            // chunk per job: 2.6 s on the same data.
            #expect(write < .milliseconds(1200), "the write took \(write)")
            #expect(pass < .seconds(3), "the maintenance pass took \(pass)")

            // The backstop still works: running jobs whose chunks are gone (a worker died between statements of
            // its write) are finished, failed when nothing was delivered.
            let drained = try await db.exec("SELECT id FROM push.jobs WHERE state = 'running' AND priority = 5 ORDER BY id LIMIT 2")
                .map { try $0.decode(Int64.self) }
            try await db.exec("UPDATE push.jobs SET failed = 1 WHERE id = \(drained[1])")
            try await db.exec("DELETE FROM push.chunks WHERE job_id = ANY (\(drained))")
            #expect(try await store.maintain(deadWorkerAfter: .seconds(60)).jobsFinished == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(drained[0]) AND state = 'done' AND finished_at IS NOT NULL") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(drained[1]) AND state = 'failed'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state = 'running'") == 18999)
        }
    }

    @Test func anAppAtItsAllowanceIsSkippedSoOtherAppsGetTheRoom() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("slow")
            try await db.createApp("fast")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'slow', lpad(to_hex(g), 64, '0') FROM generate_series(1, 100) g")
            _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('slow', \(Self.payload), priority => 5)"))
            let store = Self.store(db)
            _ = try await store.expandNextDueJob(chunkSize: 10)
            for i in 0..<5 {
                _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('fast', \(Self.payload), tokens => ARRAY['\(TestTokens.token(i))'])"))
            }
            _ = try await store.expandDueSmallJobs(chunkSize: 10, limit: 100)
            // 'slow' may take 15 tokens: its first two chunks (0 and 10 tokens before), not more.
            let first = try await store.claimChunks(
                ClaimBudget(room: 1000, maximumChunks: 100, appAllowances: ["slow": 15]), lease: .seconds(30))
            #expect(first.filter { $0.appID == "slow" }.count == 2)
            #expect(first.filter { $0.appID == "fast" }.count == 5)
            #expect(first.first?.appID == "slow", "higher priority still comes first")
            // At 0 it is not looked at at all.
            #expect(try await store.claimChunks(
                ClaimBudget(room: 1000, maximumChunks: 100, appAllowances: ["slow": 0]), lease: .seconds(30)).isEmpty)
        }
    }

    @Test func aRestartedProcessUnderTheSameIdNeitherRenewsNorKeepsTheOldLeases() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(1))'])"))
            let crashed = Self.store(db, worker: "pod-0")
            _ = try await crashed.expandDueSmallJobs(chunkSize: 10, limit: 10)
            let held = try #require(try await crashed.claimChunks(limit: 1, lease: .milliseconds(300)).first)
            let restarted = Self.store(db, worker: "pod-0")
            #expect(restarted.workerID == crashed.workerID)
            #expect(restarted.leaseOwner != crashed.leaseOwner)
            _ = try await restarted.heartbeat(lease: .seconds(30), liveWindow: .seconds(30), holding: [held.id])
            try await db.waitUntilLeasesRanOut()
            let rescued = try #require(try await restarted.claimChunks(limit: 1, lease: .seconds(30)).first,
                                       "the old process's lease ran out and the heartbeat of the new one did not renew it")
            #expect(rescued.id == held.id)
            #expect(rescued.claims == 2)
        }
    }

    @Test func oneWriteRecordsManyChunksOfManyJobsAndSkipsALostLease() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            var jobs: [Int64] = []
            for i in 0..<10 {
                jobs.append(try await db.scalar(PostgresQuery(unsafeSQL:
                    "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(i))'])")))
            }
            let store = Self.store(db)
            _ = try await store.expandDueSmallJobs(chunkSize: 10, limit: 100)
            let chunks = try await store.claimChunks(limit: 100, lease: .seconds(30))
            #expect(chunks.count == 10)
            // Another process takes the last chunk's lease meanwhile.
            let stolen = chunks[9]
            try await db.exec("UPDATE push.chunks SET locked_by = 'someone-else' WHERE id = \(stolen.id)")
            let now = Date()
            let completions = chunks.map { chunk in
                let token = chunk.tokens[0]
                return ChunkCompletion(chunk: chunk, outcomes: [
                    FinalOutcome(token: token, status: 200, reason: nil, deliveryID: DeliveryID.make(jobID: chunk.jobID, token: token), attempt: 1, sentAt: now),
                ], answered: 1)
            }
            let before = store.statementsExecuted
            let report = try await store.complete(completions)
            // BEGIN, the SET LOCAL of the server limits, the write's statements, COMMIT.
            #expect(store.statementsExecuted - before <= 7, "one transaction for the whole batch")
            #expect(report.leaseLost == [stolen.id])
            #expect(report.jobsFinished == 9)
            #expect(try await db.scalar("SELECT count(*) FROM push.deliveries") == 9)
            #expect(try await db.scalar("SELECT count(*) FROM push.deliveries WHERE job_id = \(stolen.jobID)") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state = 'done' AND delivered = 1 AND first_sent_at IS NOT NULL") == 9)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(stolen.jobID) AND state = 'running' AND delivered = 0") == 1)
        }
    }

    @Test func aCancelledJobsChunkHeldByADeadWorkerIsDroppedNotClaimed() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let job = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), tokens => ARRAY['\(TestTokens.token(1))'])"))
            let dead = Self.store(db, worker: "dead")
            _ = try await dead.expandDueSmallJobs(chunkSize: 10, limit: 10)
            _ = try #require(try await dead.claimChunks(limit: 1, lease: .milliseconds(200)).first)
            #expect(try await db.scalar("SELECT push.cancel(\(job))::int::int8") == 1)
            try await db.waitUntilLeasesRanOut()
            let rescuer = Self.store(db, worker: "rescuer")
            #expect(try await rescuer.claimChunks(limit: 10, lease: .seconds(30)).isEmpty, "a cancelled job is never sent again")
            let report = try await rescuer.maintain(deadWorkerAfter: .seconds(60))
            #expect(report.chunksOfEndedJobsDropped == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 0)
        }
    }
}

@Suite(.database, .timeLimit(.minutes(2)))
struct RetentionTests {
    @Test func maintenanceRemovesOnlyWhatIsOlderThanTheRetentionInSmallBatches() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("""
                SELECT push.enqueue('a', '{"aps":{}}', tokens => ARRAY[lpad(to_hex(g), 64, '0')]) FROM generate_series(1, 30) g
                """)
            // 25 finished 40 days ago, 3 finished yesterday, 2 still queued.
            try await db.exec("""
                UPDATE push.jobs SET state = 'done', finished_at = now() - interval '40 days'
                 WHERE id IN (SELECT id FROM push.jobs ORDER BY id LIMIT 25)
                """)
            try await db.exec("""
                UPDATE push.jobs SET state = 'failed', finished_at = now() - interval '1 day'
                 WHERE id IN (SELECT id FROM push.jobs WHERE state = 'queued' ORDER BY id LIMIT 3)
                """)
            // A chunk left behind by the oldest finished job, and one of a queued job.
            try await db.exec("""
                INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, tokens, estimated_tokens)
                SELECT id, 'a', 0, 0, 'tokens', tokens, 1 FROM push.jobs WHERE id IN (SELECT min(id) FROM push.jobs UNION SELECT max(id) FROM push.jobs)
                """)
            try await db.exec("""
                INSERT INTO push.pruned_devices (app_id, token, reason, pruned_at)
                SELECT 'a', lpad(to_hex(g), 64, '0'), 'Unregistered', now() - make_interval(days => g) FROM generate_series(1, 60) g
                """)
            try await db.exec("""
                INSERT INTO push.prune_candidates (app_id, token, job_id, status, reason, reported_at)
                VALUES ('a', 'aa', 1, 410, 'Unregistered', now() - interval '31 days'), ('a', 'bb', 1, 410, 'Unregistered', now())
                """)
            let store = QueueStore(client: db.client, workerID: "leader", logger: db.logger)
            let first = try await store.removeExpired(olderThan: .seconds(30 * 86_400), batchSize: 10)
            #expect(first.jobsRemoved == 10 && first.auditRowsRemoved == 10 && first.pruneCandidatesRemoved == 1)
            while try await store.removeExpired(olderThan: .seconds(30 * 86_400), batchSize: 10).jobsRemoved > 0 {}
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 5, "recent and unfinished jobs stay")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state = 'queued'") == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.pruned_devices") == 29, "audit rows of the last 29 days stay")
            #expect(try await db.scalar("SELECT count(*) FROM push.prune_candidates") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE job_id = (SELECT max(id) FROM push.jobs)") == 1,
                    "a removed job's chunk goes with it; a queued job's chunk stays")
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 1)
            // The job batch is found through the partial index on finished_at, not a scan of every job.
            let plan = try await db.rows("""
                EXPLAIN SELECT id FROM push.jobs WHERE state IN ('done', 'failed', 'cancelled')
                   AND finished_at < now() - interval '30 days' ORDER BY finished_at LIMIT 1000
                """)
            var text = ""
            for try await line in plan.decode(String.self) { text += line + "\n" }
            #expect(text.contains("jobs_finished"), "\(text)")
        }
    }
}

@Suite(.database, .timeLimit(.minutes(2)))
struct HeartbeatTests {
    @Test func aHeartbeatDoesNotWaitForAChunkRowAWriteHoldsAndStillBeatsTheRegistry() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("""
                SELECT push.enqueue('a', '{"aps":{}}', tokens => ARRAY[lpad(to_hex(g), 64, '0')]) FROM generate_series(1, 2) g
                """)
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            try await store.registerWorker(hostname: "h", pid: 1)
            _ = try await store.expandDueSmallJobs(chunkSize: 10, limit: 10)
            let chunks = try await store.claimChunks(limit: 10, lease: .seconds(30))
            #expect(chunks.count == 2)
            try await db.exec("UPDATE push.workers SET heartbeat_at = now() - interval '1 hour'")
            // Another transaction holds one chunk row (as this process's own completion write does) for 3 s.
            let holder = Task {
                try await db.client.withTransaction(logger: db.logger) { connection in
                    _ = try await connection.query("SELECT id FROM push.chunks WHERE id = \(chunks[0].id) FOR UPDATE", logger: db.logger).collect()
                    try await Task.sleep(for: .seconds(3))
                }
            }
            try await Task.sleep(for: .milliseconds(300))
            let started = ContinuousClock.now
            _ = try await store.heartbeat(lease: .seconds(60), liveWindow: .seconds(30), holding: chunks.map(\.id))
            #expect(ContinuousClock.now - started < .seconds(2), "the heartbeat skipped the locked row")
            #expect(try await db.scalar("SELECT count(*) FROM push.workers WHERE heartbeat_at > now() - interval '5 seconds'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE id = \(chunks[1].id) AND locked_until > now() + interval '45 seconds'") == 1)
            try await holder.value
        }
    }
}
