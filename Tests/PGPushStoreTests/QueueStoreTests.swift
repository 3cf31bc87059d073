import Foundation
import Logging
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

extension QueueStore {
    /// A claim of up to `limit` chunks with room to spare, for tests about order and leases.
    func claimChunks(limit: Int, lease: Duration) async throws -> [ClaimedChunk] {
        try await claimChunks(ClaimBudget(room: 1_000_000_000, maximumChunks: limit), lease: lease)
    }
}

/// The worker's SQL against the real schema: expansion, claim order, guarded completion, leases, cancel.
@Suite(.database, .timeLimit(.minutes(3)))
struct QueueStoreTests {
    static func store(_ db: TestDatabase, worker: String = "w1") -> QueueStore {
        QueueStore(client: db.client, workerID: worker, logger: db.logger)
    }

    @Test func rangeExpansionCoversTheAudienceExactlyOnce() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 2500) g")
            let job = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let store = Self.store(db)
            let expansion = try #require(try await store.expandNextDueJob(chunkSize: 1000))
            #expect(expansion.jobID == job)
            #expect(expansion.total == 2500)
            #expect(expansion.chunks == 3)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'running' AND total = 2500") == 1)

            let chunks = try await store.claimChunks(limit: 10, lease: .seconds(30))
            #expect(chunks.count == 3)
            var seen: [String] = []
            for chunk in chunks {
                #expect(chunk.job.id == job)
                seen += try await store.tokens(of: chunk)
            }
            #expect(seen.count == 2500)
            #expect(Set(seen).count == 2500)
            #expect(try await store.expandNextDueJob(chunkSize: 1000) == nil)
        }
    }

    @Test func explicitTokensAndAudienceFiltersExpandCorrectly() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for i in 0..<30 {
                try await db.exec("SELECT push.register_device('a', \(TestTokens.token(i)), user_id => \("u\(i % 3)"), tags => \(i % 2 == 0 ? "{even}" : "{odd}")::text[])")
            }
            let explicit = try await db.scalar("SELECT push.enqueue('a', '{\"aps\":{}}', tokens => ARRAY[\(TestTokens.token(100)), \(TestTokens.token(101)), \(TestTokens.token(102))], priority => 5)")
            let users = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', user_ids => '{u1}')"#)
            let tags = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', tags => '{even}')"#)
            let store = Self.store(db)
            var totals: [Int64: Int64] = [:]
            while let expansion = try await store.expandNextDueJob(chunkSize: 2) {
                totals[expansion.jobID] = expansion.total
            }
            #expect(totals == [explicit: 3, users: 10, tags: 15])
            var tokensByJob: [Int64: [String]] = [:]
            while true {
                let chunks = try await store.claimChunks(limit: 100, lease: .seconds(30))
                if chunks.isEmpty { break }
                for chunk in chunks {
                    tokensByJob[chunk.jobID, default: []] += try await store.tokens(of: chunk)
                    try await store.complete(ChunkCompletion(chunk: chunk))
                }
            }
            #expect(Set(tokensByJob[explicit] ?? []) == Set([100, 101, 102].map { TestTokens.token($0) }))
            #expect(Set(tokensByJob[users] ?? []).count == 10)
            #expect(Set(tokensByJob[tags] ?? []).count == 15)
        }
    }

    @Test func claimOrderPutsPriorityFirstThenSharesBroadcastsByChunkNumber() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 50) g")
            let first = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let second = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let urgent = try await db.scalar("SELECT push.enqueue('a', '{\"aps\":{}}', tokens => ARRAY[\(TestTokens.token(999))], priority => 10)")
            let store = Self.store(db)
            while try await store.expandNextDueJob(chunkSize: 10) != nil {}
            let claimed = try await store.claimChunks(limit: 5, lease: .seconds(30))
            #expect(claimed.first?.jobID == urgent, "\(claimed.map { ($0.jobID, $0.seq, $0.priority) })")
            // Then chunk 0 of each broadcast before chunk 1 of either.
            #expect(Set(claimed[1...2].map(\.jobID)) == [first, second], "\(claimed.map { ($0.jobID, $0.seq, $0.priority) })")
            #expect(claimed[1...2].allSatisfy { $0.seq == 0 })
            #expect(claimed[3...4].allSatisfy { $0.seq == 1 })
        }
    }

    @Test func completionIsGuardedByTheLeaseAndRecordsOutcomesOnce() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let token = TestTokens.token(1)
            let job = try await db.scalar("SELECT push.enqueue('a', '{\"aps\":{}}', tokens => ARRAY[\(token)])")
            let owner = Self.store(db, worker: "owner")
            let thief = Self.store(db, worker: "thief")
            _ = try await owner.expandNextDueJob(chunkSize: 10)
            let chunk = try #require(try await owner.claimChunks(limit: 1, lease: .seconds(1)).first)
            // Nobody else can claim it while the lease holds; after it expires, a rescue counts as a claim.
            #expect(try await thief.claimChunks(limit: 1, lease: .seconds(30)).isEmpty)
            try await db.waitUntilLeasesRanOut()
            #expect(try await owner.claimChunks(limit: 1, lease: .seconds(30)).isEmpty, "a worker must not rescue its own chunk")
            let rescued = try #require(try await thief.claimChunks(limit: 1, lease: .seconds(30)).first)
            #expect(rescued.id == chunk.id)
            #expect(rescued.claims == 2)

            let outcome = FinalOutcome(token: token, status: 200, reason: nil, deliveryID: DeliveryID.make(jobID: job, token: token), attempt: 1, sentAt: Date())
            await #expect(throws: LeaseLost.self) {
                try await owner.complete(ChunkCompletion(chunk: chunk, outcomes: [outcome]))
            }
            try await thief.complete(ChunkCompletion(chunk: rescued, outcomes: [outcome], answered: 1))
            #expect(try await db.scalar("SELECT count(*) FROM push.deliveries") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'done' AND delivered = 1") == 1)
        }
    }

    @Test func retriesBecomeNewChunksAndTheJobEndsWithTheLastOne() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let tokens = (0..<3).map { TestTokens.token($0) }
            let job = try await db.scalar("SELECT push.enqueue('a', '{\"aps\":{}}', tokens => \(tokens))")
            let store = Self.store(db)
            _ = try await store.expandNextDueJob(chunkSize: 10)
            let chunk = try #require(try await store.claimChunks(limit: 1, lease: .seconds(30)).first)
            let now = Date()
            try await store.complete(ChunkCompletion(
                chunk: chunk,
                outcomes: [FinalOutcome(token: tokens[0], status: 200, reason: nil, deliveryID: UUID(), attempt: 1, sentAt: now)],
                requeued: [RequeuedTokens(tokens: [tokens[1], tokens[2]], attempt: 2, notBefore: now.addingTimeInterval(1), lastReason: "ServiceUnavailable")],
                pruneCandidates: []))
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'running'") == 1)
            #expect(try await store.claimChunks(limit: 1, lease: .seconds(30)).isEmpty, "a retry waits for its backoff")
            try await db.waitUntil("SELECT count(*) FROM push.chunks WHERE job_id = \(job) AND next_attempt_at > now()")
            let retry = try #require(try await store.claimChunks(limit: 1, lease: .seconds(30)).first)
            #expect(retry.attempt == 2)
            #expect(Set(retry.tokens) == [tokens[1], tokens[2]])
            #expect(retry.lastReason == "ServiceUnavailable")
            try await store.complete(ChunkCompletion(chunk: retry, outcomes: [
                FinalOutcome(token: tokens[1], status: 200, reason: nil, deliveryID: UUID(), attempt: 2, sentAt: now),
                FinalOutcome(token: tokens[2], status: 503, reason: "ServiceUnavailable", deliveryID: UUID(), attempt: 2, sentAt: now),
            ]))
            let rows = try await db.rows("SELECT state, delivered, failed FROM push.job_progress WHERE job_id = \(job)")
            for try await (state, delivered, failed) in rows.decode((String, Int64, Int64).self) {
                #expect(state == "done")
                #expect(delivered == 2)
                #expect(failed == 1)
            }
        }
    }

    @Test func cancelDeletesUnclaimedChunksAndStopsRetries() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 30) g")
            let job = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let store = Self.store(db)
            _ = try await store.expandNextDueJob(chunkSize: 10)
            let chunk = try #require(try await store.claimChunks(limit: 1, lease: .seconds(30)).first)
            #expect(try await db.scalar("SELECT push.cancel(\(job))::int::int8") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 1, "only the chunk in flight remains")
            try await store.complete(ChunkCompletion(chunk: chunk, requeued: [RequeuedTokens(tokens: [TestTokens.token(1)], attempt: 2, notBefore: Date(), lastReason: "x")]))
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE state = 'cancelled'") == 1)
        }
    }
}
