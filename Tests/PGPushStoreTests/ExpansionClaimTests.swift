import Foundation
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Small jobs claimed by the statement that expands them: what the claim would have taken next, and nothing
/// it would have left for later.
@Suite(.database, .timeLimit(.minutes(3)))
struct ExpansionClaimTests {
    static let payload = #"'{"aps":{"alert":"hi"}}'"#

    static func store(_ db: TestDatabase, worker: String = "w1") -> QueueStore {
        QueueStore(client: db.client, workerID: worker, logger: db.logger)
    }

    static func enqueueOneToken(_ db: TestDatabase, app: String = "a", _ i: Int, priority: Int = 0) async throws -> Int64 {
        try await db.scalar(PostgresQuery(unsafeSQL:
            "SELECT push.enqueue('\(app)', \(payload), tokens => ARRAY['\(TestTokens.token(i))'], priority => \(priority))"))
    }

    @Test func theExpansionClaimsTheChunksItMakesUpToTheRoomAndLeavesTheRestForTheClaim() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            var jobs: [Int64] = []
            for i in 0..<5 { jobs.append(try await Self.enqueueOneToken(db, i)) }
            let store = Self.store(db)
            let before = store.statementsExecuted
            let expansion = try await store.expandDueSmallJobs(
                chunkSize: 10, limit: 100, claiming: ClaimBudget(room: 3, maximumChunks: 10), lease: .seconds(30))
            #expect(store.statementsExecuted - before == 1)
            #expect(expansion.jobs == 5)
            #expect(expansion.claimed.count == 3)
            #expect(expansion.unclaimedChunks == 2)
            // The oldest first, as the claim takes them, with everything the claim returns.
            #expect(expansion.claimed.map(\.jobID) == Array(jobs.prefix(3)))
            let first = try #require(expansion.claimed.first)
            #expect(first.tokens == [TestTokens.token(0)])
            #expect(first.claims == 1 && first.attempt == 1 && first.estimatedTokens == 1)
            #expect(String(decoding: first.job.payload, as: UTF8.self) == #"{"aps": {"alert": "hi"}}"#)
            #expect(first.job.pushType == "alert")
            #expect(try await db.scalar(
                "SELECT count(*) FROM push.chunks WHERE locked_by = \(store.leaseOwner) AND locked_until > now() AND claims = 1") == 3)
            // Another worker's claim finds the two left, not the three held.
            let other = try await Self.store(db, worker: "w2").claimChunks(ClaimBudget(room: 100, maximumChunks: 100), lease: .seconds(30))
            #expect(Set(other.map(\.jobID)) == Set(jobs.suffix(2)))
        }
    }

    @Test func theChunkCountOfTheBudgetBoundsTheClaimToo() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for i in 0..<4 { _ = try await Self.enqueueOneToken(db, i) }
            let expansion = try await Self.store(db).expandDueSmallJobs(
                chunkSize: 10, limit: 100, claiming: ClaimBudget(room: 100, maximumChunks: 1), lease: .seconds(30))
            #expect(expansion.claimed.count == 1)
            #expect(expansion.unclaimedChunks == 3)
        }
    }

    @Test func workWaitingAtAHigherPriorityKeepsLowerPriorityJobsForTheClaim() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 30) g")
            _ = try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('a', \(Self.payload), priority => 5)"))
            let store = Self.store(db)
            _ = try await store.expandNextDueJob(chunkSize: 10)
            let low = try await Self.enqueueOneToken(db, 100, priority: 0)
            let budget = ClaimBudget(room: 100, maximumChunks: 100)
            let lowExpansion = try await store.expandDueSmallJobs(chunkSize: 10, limit: 100, claiming: budget, lease: .seconds(30))
            #expect(lowExpansion.jobs == 1)
            #expect(lowExpansion.claimed.isEmpty, "the broadcast's chunks at priority 5 come first")
            #expect(lowExpansion.unclaimedChunks == 1)
            // At the broadcast's priority it is claimed at once: only a higher priority holds it back. (The claim
            // would have taken the broadcast's first chunk before it; the worker's claim service, which keeps
            // every other turn, takes those.)
            let urgent = try await Self.enqueueOneToken(db, 101, priority: 5)
            let urgentExpansion = try await store.expandDueSmallJobs(chunkSize: 10, limit: 100, claiming: budget, lease: .seconds(30))
            #expect(urgentExpansion.claimed.map(\.jobID) == [urgent])
            let claim = try await store.claimChunks(budget, lease: .seconds(30))
            #expect(claim.count == 4)
            #expect(claim.last?.jobID == low)
        }
    }

    @Test func throttledAppsAndChunksOverTheSizeLimitAreLeftForTheClaim() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let throttled = try await Self.enqueueOneToken(db, app: "a", 1)
            let free = try await Self.enqueueOneToken(db, app: "b", 2)
            let pair = try await db.scalar(PostgresQuery(unsafeSQL:
                "SELECT push.enqueue('b', \(Self.payload), tokens => ARRAY['\(TestTokens.token(3))', '\(TestTokens.token(4))'])"))
            let expansion = try await Self.store(db).expandDueSmallJobs(
                chunkSize: 10, limit: 100,
                claiming: ClaimBudget(room: 100, maximumChunks: 100, appAllowances: ["a": 50], maximumChunkTokens: 1),
                lease: .seconds(30))
            #expect(expansion.jobs == 3)
            #expect(expansion.claimed.map(\.jobID) == [free])
            #expect(expansion.unclaimedChunks == 2)
            let left = try await Self.store(db, worker: "w2").claimChunks(ClaimBudget(room: 100, maximumChunks: 100), lease: .seconds(30))
            #expect(Set(left.map(\.jobID)) == [throttled, pair])
        }
    }

    @Test func withoutABudgetNothingIsClaimed() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            for i in 0..<3 { _ = try await Self.enqueueOneToken(db, i) }
            let expansion = try await Self.store(db).expandDueSmallJobs(chunkSize: 10, limit: 100, claiming: nil, lease: .seconds(30))
            #expect(expansion.jobs == 3 && expansion.claimed.isEmpty && expansion.unclaimedChunks == 3)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE locked_by IS NULL AND claims = 0") == 3)
        }
    }
}
