import Foundation
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// `pgpush worker --stale-device-days N`: QueueStore.removeStaleDevices removes the devices that have not
/// registered again for N days, audited with reason Stale (and so a devices_pruned event); younger ones stay.
@Suite(.database, .timeLimit(.minutes(3)))
struct StaleDevicesTests {
    static let thirtyDays: Duration = .seconds(30 * 86_400)

    /// Registers `token` for `app` as if its last registration was `days` ago.
    static func register(_ db: TestDatabase, _ app: String, _ token: String, daysAgo days: Double, kind: String = "device") async throws {
        let activity: String? = kind == "activity" ? "act-\(token.prefix(8))" : nil
        try await db.exec("""
            SELECT push.register_device(\(app), \(token), user_id => 'u-' || left(\(token), 6), token_kind => \(kind), activity_id => \(activity))
            """)
        try await db.exec("""
            UPDATE push.devices SET registered_at = now() - make_interval(secs => \(days * 86_400)) WHERE app_id = \(app) AND token = \(token)
            """)
    }

    @Test func devicesRegistered31DaysAgoAreRemovedWith30AuditedAsStaleWithAnEvent() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            try await db.createApp("b")
            let old = [TestTokens.token(1), TestTokens.token(2)], young = TestTokens.token(3), otherApp = TestTokens.token(4)
            for token in old { try await Self.register(db, "a", token, daysAgo: 31) }
            try await Self.register(db, "a", young, daysAgo: 29)
            try await Self.register(db, "b", otherApp, daysAgo: 45)
            // A Live Activity update token has a lifetime of its own (--activity-token-lifetime-hours).
            let activity = TestTokens.token(5, prefix: "a1")
            try await Self.register(db, "a", activity, daysAgo: 40, kind: "activity")

            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            #expect(try await store.removeStaleDevices(olderThan: Self.thirtyDays) == 3)
            let left = try await db.exec("SELECT token FROM push.devices ORDER BY token").map { try $0.decode(String.self) }
            #expect(left == [young, activity].sorted())
            let audited = try await db.exec("""
                SELECT app_id, token, reason, user_id IS NOT NULL AND registered_at < now() - interval '30 days'
                  FROM push.pruned_devices ORDER BY token
                """).map { try $0.decode((String, String, String, Bool).self) }
            #expect(audited.map(\.1) == (old + [otherApp]).sorted())
            let auditedAsStale = audited.allSatisfy { $0.2 == "Stale" && $0.3 }
            #expect(auditedAsStale)
            // One devices_pruned event per app, each token in full, with its reason.
            let events = try await db.exec("""
                SELECT app_id, (SELECT array_agg(d->>'token' ORDER BY d->>'token') FROM jsonb_array_elements(body->'devices') d),
                       (SELECT bool_and(d->>'reason' = 'Stale') FROM jsonb_array_elements(body->'devices') d)
                  FROM push.job_events WHERE event = 'devices_pruned' ORDER BY app_id
                """).map { try $0.decode((String, [String], Bool).self) }
            #expect(events.map(\.0) == ["a", "b"])
            #expect(events.first?.1 == old.sorted())
            #expect(events.last?.1 == [otherApp])
            let allStale = events.allSatisfy { $0.2 }
            #expect(allStale)

            // Nothing more to do; a registration makes a device young again.
            #expect(try await store.removeStaleDevices(olderThan: Self.thirtyDays) == 0)
            try await db.exec("UPDATE push.devices SET registered_at = now() - interval '31 days' WHERE token = \(young)")
            try await db.exec("SELECT push.register_device('a', \(young))")
            #expect(try await store.removeStaleDevices(olderThan: Self.thirtyDays) == 0)
        }
    }

    @Test func aSweepGoesThroughTheTableInBatchesAndReadsEachRowOnce() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            // 25 devices; every other one is stale.
            try await db.exec("""
                INSERT INTO push.devices (app_id, token, registered_at)
                SELECT 'a', lpad(to_hex(g), 64, '0'), now() - make_interval(days => CASE WHEN g % 2 = 0 THEN 31 ELSE 1 END)
                  FROM generate_series(1, 25) g
                """)
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            var batches: [QueueStore.StaleDeviceBatch] = []
            var next: String?
            repeat {
                let batch = try await store.removeStaleDevices(olderThan: Self.thirtyDays, after: next, batchSize: 5)
                batches.append(batch)
                next = batch.next
            } while next != nil && batches.count < 10
            #expect(batches.map(\.removed) == [5, 5, 2])
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 13)
            #expect(try await db.scalar("SELECT count(*) FROM push.pruned_devices WHERE reason = 'Stale'") == 12)
            // One event per batch statement.
            #expect(try await db.scalar("SELECT count(*) FROM push.job_events WHERE event = 'devices_pruned'") == 3)
        }
    }
}
