import Foundation
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// A job's audience while it changes under a running broadcast (migration 0016): the devices of the audience
/// when the job is expanded that still exist when their key range is read. The total follows what is read, so
/// that a finished job's total is the number of its outcomes, and the corrections are counted beside it.
@Suite(.database, .timeLimit(.minutes(3)))
struct AudienceTests {
    static func store(_ db: TestDatabase, worker: String = "w1") -> QueueStore {
        QueueStore(client: db.client, workerID: worker, logger: db.logger)
    }

    static func token(_ hex: String) -> String { String(repeating: "0", count: 64 - hex.count) + hex }

    /// Every token read is delivered, as a worker would record it.
    static func deliverAll(_ store: QueueStore, _ chunk: ClaimedChunk) async throws -> [String] {
        let tokens = try await store.tokens(of: chunk)
        let now = Date()
        try await store.complete(ChunkCompletion(
            chunk: chunk,
            outcomes: tokens.map {
                FinalOutcome(token: $0, status: 200, reason: nil, deliveryID: DeliveryID.make(jobID: chunk.jobID, token: $0), attempt: 1, sentAt: now)
            },
            answered: tokens.count, readTokens: tokens.count))
        return tokens
    }

    /// The numbers of every ended job add up: total is the sum of its outcomes and of its rows, and no token
    /// has two outcomes.
    static func expectCountsAddUp(_ db: TestDatabase) async throws {
        #expect(try await db.scalar("""
            SELECT count(*) FROM push.jobs j
             WHERE j.state IN ('done', 'failed', 'cancelled')
               AND (j.total IS DISTINCT FROM j.delivered + j.failed + j.expired
                    OR j.total <> (SELECT count(*) FROM push.deliveries d WHERE d.job_id = j.id)
                    OR j.android_total <> (SELECT count(*) FROM push.deliveries d WHERE d.job_id = j.id AND d.platform = 'android'))
            """) == 0)
        #expect(try await db.scalar("SELECT count(*) FROM (SELECT 1 FROM push.deliveries GROUP BY job_id, token HAVING count(*) > 1) t") == 0)
        #expect(try await db.scalar("""
            SELECT count(*) FROM push.job_progress
             WHERE state IN ('done', 'failed', 'cancelled') AND (total <> delivered + failed OR pending <> 0)
            """) == 0)
    }

    @Test func aBroadcastsTotalFollowsItsKeyRangesAsTheyAreRead() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            // Tokens 01…1e (1–30), in three ranges of ten: (…0a], (0a…14], (14…).
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 30) g")
            let job = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let store = Self.store(db)
            let expansion = try #require(try await store.expandNextDueJob(chunkSize: 10))
            #expect(expansion.total == 30 && expansion.chunks == 3)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(job) AND audience_at IS NOT NULL") == 1)

            // While it waits to be sent: an operator deletes 05; 08 moves to Android (an app without FCM);
            // 0c is replaced by a new token that sorts into the last range; 11 re-registers as itself; and a new
            // device registers into the last range.
            try await db.exec("DELETE FROM push.devices WHERE app_id = 'a' AND token = \(Self.token("5"))")
            try await db.exec("SELECT push.register_device('a', \(Self.token("8")), platform => 'android')")
            try await db.exec("SELECT push.register_device('a', \(Self.token("1d8")), replaces => \(Self.token("c")))")
            try await db.exec("SELECT push.register_device('a', \(Self.token("11")))")
            try await db.exec("SELECT push.register_device('a', \(Self.token("1e5")))")

            var sent: [String] = []
            for chunk in try await store.claimChunks(limit: 10, lease: .seconds(30)) {
                sent += try await Self.deliverAll(store, chunk)
            }
            #expect(sent.count == 28)
            #expect(Set(sent).count == 28)
            #expect(sent.contains(Self.token("1d8")), "the replacement keeps the replaced device's place")
            #expect(sent.contains(Self.token("11")), "a re-registration is the same device")
            #expect(!sent.contains(Self.token("1e5")), "registered after the expansion: not in the audience")
            #expect(!sent.contains(Self.token("5")) && !sent.contains(Self.token("8")) && !sent.contains(Self.token("c")))

            let rows = try await db.rows("""
                SELECT state, total, delivered, removed_before_send, added_before_send, cancelled_tokens, android_total
                  FROM push.jobs WHERE id = \(job)
                """)
            for try await (state, total, delivered, removed, added, cancelled, android) in rows.decode((String, Int64, Int64, Int64, Int64, Int64, Int64).self) {
                #expect(state == "done")
                #expect(total == 28 && delivered == 28)
                #expect(removed == 3, "05, 08 and 0c")
                #expect(added == 1, "1d8")
                #expect(cancelled == 0 && android == 0)
                #expect(total + removed - added + cancelled == 30, "the audience counted at expansion")
            }
            try await Self.expectCountsAddUp(db)
        }
    }

    @Test func devicesRegisteredAfterTheExpansionAreNotSentEvenAtTheOpenEnds() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 5) g")
            _ = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let store = Self.store(db)
            _ = try #require(try await store.expandNextDueJob(chunkSize: 100))
            // Into the one range, open at both ends: a new device below the first token and one above the last.
            try await db.exec("SELECT push.register_device('a', \(Self.token("0")))")
            try await db.exec("SELECT push.register_device('a', \(Self.token("ff")))")
            let created = try await db.scalar("SELECT count(*) FROM push.devices WHERE created_at > (SELECT audience_at FROM push.jobs)")
            #expect(created == 2)
            let chunk = try #require(try await store.claimChunks(limit: 1, lease: .seconds(30)).first)
            #expect(try await Self.deliverAll(store, chunk).count == 5)
            try await Self.expectCountsAddUp(db)
        }
    }

    @Test func aCancelTakesTheTokensItWillNotSendOutOfTheTotal() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 40) g")
            // Cancelled before its expansion: it reached nobody.
            let queued = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}', send_at => now() + interval '1 hour')"#)
            #expect(try await db.scalar("SELECT push.cancel(\(queued))::int::int8") == 1)
            #expect(try await db.scalar("SELECT total FROM push.jobs WHERE id = \(queued)") == 0)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(queued)") == 0)

            let job = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let store = Self.store(db)
            _ = try #require(try await store.expandNextDueJob(chunkSize: 10))
            let claimed = try await store.claimChunks(limit: 2, lease: .seconds(30))
            #expect(claimed.count == 2)
            // A worker that dies holding a chunk: maintenance drops it once its lease runs out.
            let dead = Self.store(db, worker: "dead")
            let held = try #require(try await dead.claimChunks(limit: 1, lease: .milliseconds(200)).first)
            #expect(try await db.scalar("SELECT push.cancel(\(job))::int::int8") == 1)
            // One unclaimed range dropped by the cancel, with its size at expansion.
            #expect(try await db.scalar("SELECT total FROM push.jobs WHERE id = \(job)") == 30)
            #expect(try await db.scalar("SELECT cancelled_tokens FROM push.jobs WHERE id = \(job)") == 10)

            // The first chunk in flight recorded 4 tokens before it noticed the cancel; the second one none.
            let tokens = try await store.tokens(of: claimed[0])
            let now = Date()
            try await store.complete(ChunkCompletion(
                chunk: claimed[0],
                outcomes: tokens.prefix(4).map {
                    FinalOutcome(token: $0, status: 200, reason: nil, deliveryID: DeliveryID.make(jobID: job, token: $0), attempt: 1, sentAt: now)
                },
                answered: 4, readTokens: tokens.count))
            try await store.complete(ChunkCompletion(chunk: claimed[1], readTokens: 10))
            try await db.waitUntil("SELECT count(*) FROM push.chunks WHERE id = \(held.id) AND locked_until >= now()")
            let report = try await Self.store(db, worker: "leader").maintain(deadWorkerAfter: .seconds(60))
            #expect(report.chunksOfEndedJobsDropped == 1)
            _ = held

            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 0)
            let rows = try await db.rows("SELECT state, total, delivered, cancelled_tokens FROM push.jobs WHERE id = \(job)")
            for try await (state, total, delivered, cancelled) in rows.decode((String, Int64, Int64, Int64).self) {
                #expect(state == "cancelled")
                #expect(total == 4 && delivered == 4)
                #expect(cancelled == 36)
            }
            try await Self.expectCountsAddUp(db)
        }
    }

    @Test func expiryAndJobFailuresAreOutcomesOfTheTokensRead() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.exec("INSERT INTO push.devices (app_id, token) SELECT 'a', lpad(to_hex(g), 64, '0') FROM generate_series(1, 20) g")
            let job = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{}}')"#)
            let store = Self.store(db)
            _ = try #require(try await store.expandNextDueJob(chunkSize: 10))
            try await db.exec("DELETE FROM push.devices WHERE token IN (\(Self.token("3")), \(Self.token("f")))")
            let now = Date()
            for chunk in try await store.claimChunks(limit: 10, lease: .seconds(30)) {
                let tokens = try await store.tokens(of: chunk)
                try await store.complete(ChunkCompletion(
                    chunk: chunk,
                    outcomes: tokens.map {
                        FinalOutcome(token: $0, status: 0, reason: chunk.seq == 0 ? ChunkCompletion.expiredReason : "BadExpirationDate",
                                     deliveryID: DeliveryID.make(jobID: job, token: $0), attempt: 1, sentAt: now)
                    },
                    readTokens: tokens.count))
            }
            let rows = try await db.rows("SELECT state, total, expired, failed, removed_before_send FROM push.jobs WHERE id = \(job)")
            for try await (state, total, expired, failed, removed) in rows.decode((String, Int64, Int64, Int64, Int64).self) {
                #expect(state == "failed")
                #expect(total == 18 && expired == 9 && failed == 9 && removed == 2)
            }
            try await Self.expectCountsAddUp(db)
        }
    }
}
