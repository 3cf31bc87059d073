import Foundation
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The producer's SQL API for Live Activities: activity tokens registered as devices of a kind, per-token
/// updates and starts, broadcast channels, and every bad input refused at enqueue with the field named.
@Suite(.database, .timeLimit(.minutes(3)))
struct LiveActivityProducerAPITests {
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"eta":5}}}"#
    static let start = #"{"aps":{"timestamp":1700000000,"event":"start","alert":{"title":"On its way"},"attributes-type":"DeliveryAttributes","attributes":{"order":"42"}}}"#

    /// App "app" (token auth), "cert" (certificate only) and "dual" (token auth and FCM); on "app", three
    /// ordinary devices, update tokens of activities order-1 and order-2, and push-to-start tokens of two types.
    static func setUp(_ db: TestDatabase) async throws {
        try await db.createApp("app")
        try await db.exec("INSERT INTO push.apps (id, topic, certificate_path) VALUES ('cert', 'com.example.cert', 'cert.p12')")
        try await db.exec("""
            INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path, fcm_project_id, fcm_service_account_path)
            VALUES ('dual', 'com.example.dual', 'TEAM123456', 'KEY1234567', 'dual.p8', 'demo-project', 'dual-sa.json')
            """)
        for index in 1...3 {
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(index)), user_id => 'u1')")
        }
        try await db.exec("SELECT push.register_device('app', \(TestTokens.token(11)), user_id => 'u1', token_kind => 'activity', activity_id => 'order-1')")
        try await db.exec("SELECT push.register_device('app', \(TestTokens.token(12)), user_id => 'u2', token_kind => 'activity', activity_id => 'order-2')")
        try await db.exec("""
            SELECT push.register_device('app', \(TestTokens.token(21)), user_id => 'u1', token_kind => 'activity_start', activity_type => 'DeliveryAttributes')
            """)
        try await db.exec("""
            SELECT push.register_device('app', \(TestTokens.token(22)), user_id => 'u2', token_kind => 'activity_start', activity_type => 'RideAttributes')
            """)
    }

    static func tokens(_ store: QueueStore, job: Int64, _ db: TestDatabase) async throws -> Set<String> {
        var all = Set<String>()
        for try await list in try await db.rows("SELECT tokens FROM push.chunks WHERE job_id = \(job) AND kind = 'tokens'").decode([String].self) {
            all.formUnion(list)
        }
        return all
    }

    @Test func devicesShowTheirKindAndAnUpdateTokenRotatesPerActivity() async throws {
        try await TestDatabase.with { db in
            try await Self.setUp(db)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token_kind = 'device' AND activity_id IS NULL") == 3)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token_kind = 'activity' AND activity_id = 'order-1'") == 1)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE token_kind = 'activity_start' AND activity_type = 'DeliveryAttributes'
                """) == 1)

            // A new update token for order-1 replaces the old one.
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(13)), token_kind => 'activity', activity_id => 'order-1')")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(11))") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(13)) AND activity_id = 'order-1'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token_kind = 'activity'") == 2)
            // Registering the same token again changes nothing else.
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(13)), token_kind => 'activity', activity_id => 'order-1')")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token_kind = 'activity'") == 2)
        }
    }

    @Test(arguments: [
        ("SELECT push.register_device('app', repeat('a', 64), token_kind => 'activity')", "activity_id"),
        ("SELECT push.register_device('app', repeat('a', 64), token_kind => 'activity', activity_id => '')", "activity_id"),
        ("SELECT push.register_device('app', repeat('a', 64), token_kind => 'activity_start')", "activity_type"),
        ("SELECT push.register_device('app', repeat('a', 64), token_kind => 'widget')", "token_kind"),
        ("SELECT push.register_device('app', repeat('a', 64), token_kind => NULL)", "token_kind"),
        ("SELECT push.register_device('app', repeat('a', 64), activity_id => 'order-1')", "activity_id"),
        ("SELECT push.register_device('app', repeat('a', 64), activity_type => 'T')", "activity_type"),
        ("SELECT push.register_device('app', repeat('a', 64), token_kind => 'activity_start', activity_type => 'T', activity_id => 'x')", "activity_id"),
        ("SELECT push.register_device('dual', 'fYK3abcdEFGH:APA91bHqwe-_rty0123456789', platform => 'android', token_kind => 'activity', activity_id => 'x')", "token_kind"),
        ("SELECT push.register_device('app', repeat('a', 64), token_kind => 'activity', activity_id => repeat('x', 257))", "activity_id"),
    ])
    func badActivityRegistrationsAreRefusedNamingTheField(_ statement: String, _ field: String) async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.exec("""
                INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path, fcm_project_id, fcm_service_account_path)
                VALUES ('dual', 'com.example.dual', 'TEAM123456', 'KEY1234567', 'dual.p8', 'demo-project', 'dual-sa.json')
                """)
            let error = await #expect(throws: PSQLError.self) { try await db.exec(PostgresQuery(unsafeSQL: statement)) }
            #expect(error?.serverInfo?[.columnName] == field, "\(error?.serverInfo?[.message] ?? "")")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }

    @Test func anOrdinaryJobNeverReachesActivityTokensAndLiveActivityJobsReachOnlyTheirs() async throws {
        try await TestDatabase.with { db in
            try await Self.setUp(db)
            let store = QueueStore(client: db.client, workerID: "la", logger: db.logger)
            let alert = #"{"aps":{"alert":"hello"}}"#
            let toAll = try await db.scalar("SELECT push.enqueue('app', \(alert)::jsonb)")
            let toUser = try await db.scalar("SELECT push.enqueue('app', \(alert)::jsonb, user_ids => ARRAY['u1'])")
            let toTokens = try await db.scalar("""
                SELECT push.enqueue('app', \(alert)::jsonb, tokens => ARRAY[\(TestTokens.token(1)), \(TestTokens.token(11)), \(TestTokens.token(21))])
                """)
            let byActivity = try await db.scalar("""
                SELECT push.enqueue('app', \(Self.update)::jsonb, push_type => 'liveactivity', activity_ids => ARRAY['order-1', 'order-9'])
                """)
            let starts = try await db.scalar("""
                SELECT push.enqueue('app', \(Self.start)::jsonb, push_type => 'liveactivity', activity_type => 'DeliveryAttributes')
                """)
            let userStarts = try await db.scalar("""
                SELECT push.enqueue('app', \(Self.start)::jsonb, push_type => 'liveactivity', activity_type => 'DeliveryAttributes', user_ids => ARRAY['u2'])
                """)
            // Before expansion, the progress view's estimate counts the same audiences.
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(toAll)") == 3)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(byActivity)") == 1)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(starts)") == 1)

            _ = try await store.expandDueSmallJobs(chunkSize: 1000, limit: 100)
            while try await store.expandNextDueJob(chunkSize: 1000) != nil {}
            let ordinary = Set((1...3).map { TestTokens.token($0) })
            #expect(try await Self.tokens(store, job: toUser, db) == ordinary)
            #expect(try await Self.tokens(store, job: toTokens, db) == [TestTokens.token(1)])
            #expect(try await Self.tokens(store, job: byActivity, db) == [TestTokens.token(11)])
            #expect(try await db.scalar("SELECT total FROM push.jobs WHERE id = \(userStarts)") == 0)

            // A broadcast's key ranges are read at send time with the same filter.
            let chunks = try await store.claimChunks(ClaimBudget(room: 10_000, maximumChunks: 100), lease: .seconds(30))
            var reached: [Int64: Set<String>] = [:]
            for chunk in chunks { reached[chunk.jobID, default: []].formUnion(try await store.tokens(of: chunk)) }
            #expect(reached[toAll] == ordinary)
            #expect(reached[starts] == [TestTokens.token(21)])
        }
    }

    /// (statement, the field the refusal names). Each runs against `setUp`'s apps and an active channel
    /// "match" (storage policy 0), a channel "flight" (policy 1) still being made, and a deleted "old".
    static let refusals: [(String, String)] = [
        // The ActivityKit payload.
        (#"SELECT push.enqueue('app', '{"aps":{"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":"soon","event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000.5,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"pause","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update"}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"end","content-state":"x"}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"start","attributes-type":"DeliveryAttributes","attributes":{}}}', push_type => 'liveactivity', activity_type => 'DeliveryAttributes')"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"start","alert":"x","attributes":{}}}', push_type => 'liveactivity', activity_type => 'DeliveryAttributes')"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"start","alert":"x","attributes-type":"DeliveryAttributes"}}', push_type => 'liveactivity', activity_type => 'DeliveryAttributes')"#, "payload"),
        (#"SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('timestamp', 1700000000, 'event', 'update', 'content-state', jsonb_build_object('pad', repeat('x', 4100)))), push_type => 'liveactivity', activity_ids => ARRAY['order-1'])"#, "payload"),
        // The audience.
        (#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', activity_ids => ARRAY['order-1'])"#, "activity_ids"),
        (#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', push_type => 'alert', activity_ids => ARRAY['order-1'])"#, "activity_ids"),
        (#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', activity_type => 'DeliveryAttributes')"#, "activity_type"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => '{}')"#, "activity_ids"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['a', NULL])"#, "activity_ids"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'], user_ids => ARRAY['u1'])"#, "activity_ids"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_type => 'DeliveryAttributes')"#, "activity_type"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"start","alert":"x","attributes-type":"RideAttributes","attributes":{}}}', push_type => 'liveactivity', activity_type => 'DeliveryAttributes')"#, "activity_type"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"start","alert":"x","attributes-type":"DeliveryAttributes","attributes":{}}}', push_type => 'liveactivity', user_ids => ARRAY['u1'])"#, "activity_type"),
        // Priority and credentials.
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'], apns_priority => 1)"#, "apns_priority"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'], apns_priority => 7)"#, "apns_priority"),
        (#"SELECT push.enqueue('cert', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', tokens => ARRAY[repeat('a', 64)])"#, "push_type"),
        (#"SELECT push.enqueue('dual', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', tokens => ARRAY['fYK3abcdEFGH:APA91bHqwe-_rty0123456789'])"#, "tokens"),
        (#"SELECT push.enqueue('dual', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', push_type => 'liveactivity', activity_ids => ARRAY['order-1'], fcm => '{"data":{"a":"b"}}')"#, "fcm"),
        // Channels.
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', channel => 'nope')"#, "channel"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', channel => 'flight')"#, "channel"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', channel => 'old')"#, "channel"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', channel => 'match', expires_at => now() + interval '1 hour')"#, "expires_at"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', channel => 'match', push_type => 'alert')"#, "push_type"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', channel => 'match', tokens => ARRAY[repeat('a', 64)])"#, "channel"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"start","alert":"x","attributes-type":"T","attributes":{}}}', channel => 'match')"#, "payload"),
        (#"SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('timestamp', 1700000000, 'event', 'update', 'content-state', jsonb_build_object('pad', repeat('x', 5200)))), channel => 'match')"#, "payload"),
        (#"SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}', channel => 'match', apns_priority => 7)"#, "apns_priority"),
    ]

    @Test(arguments: refusals)
    func badLiveActivityInputIsRefusedNamingTheFieldAndLeavesNoRow(_ statement: String, _ field: String) async throws {
        try await TestDatabase.with { db in
            try await Self.setUp(db)
            try await db.exec("SELECT push.create_channel('app', 'match', storage_policy => 0)")
            try await db.exec("SELECT push.create_channel('app', 'flight', storage_policy => 1)")
            try await db.exec("SELECT push.create_channel('app', 'old', storage_policy => 1)")
            try await db.exec("UPDATE push.channels SET state = 'active', channel_id = 'bWF0Y2g=', active_at = now() WHERE name = 'match'")
            try await db.exec("UPDATE push.channels SET state = 'deleted', channel_id = 'b2xk', deleted_at = now() WHERE name = 'old'")
            let error = await #expect(throws: PSQLError.self) { try await db.exec(PostgresQuery(unsafeSQL: statement)) }
            let message = error?.serverInfo?[.message] ?? ""
            #expect(error?.serverInfo?[.columnName] == field, "\(message)")
            #expect(message.contains(field) || field == "payload" || field == "tokens", "the message names \(field): \(message)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    @Test func aChannelIsMadeOnceByNameDeletedByNameAndAJobToItIsOneRequest() async throws {
        try await TestDatabase.with { db in
            try await Self.setUp(db)
            let id = try await db.scalar("SELECT push.create_channel('app', 'match-7', storage_policy => 1)")
            // The same request again is the same channel; another policy is refused.
            #expect(try await db.scalar("SELECT push.create_channel('app', 'match-7', storage_policy => 1)") == id)
            await #expect(throws: PSQLError.self) { try await db.exec("SELECT push.create_channel('app', 'match-7', storage_policy => 0)") }
            for bad: PostgresQuery in [
                "SELECT push.create_channel('cert', 'x')", "SELECT push.create_channel('nope', 'x')",
                "SELECT push.create_channel('app', '')", "SELECT push.create_channel('app', 'x', storage_policy => 2)",
                "SELECT push.delete_channel('app', 'unknown')",
            ] {
                await #expect(throws: PSQLError.self) { try await db.exec(bad) }
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.channels") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.channels WHERE state = 'creating' AND channel_id IS NULL") == 1)

            // Made on APNs (what a worker records): a job to it is one chunk of one "token", the channel's id,
            // and a policy-1 channel's message keeps 8 hours unless told otherwise.
            try await db.exec("UPDATE push.channels SET state = 'active', channel_id = 'Y2hhbm5lbA==', active_at = now() WHERE id = \(id)")
            let job = try await db.scalar("""
                SELECT push.enqueue('app', '{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"1-0"}}}', channel => 'match-7', apns_priority => 5)
                """)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(job) AND push_type = 'liveactivity' AND channel_id = 'Y2hhbm5lbA=='
                   AND expires_at BETWEEN now() + interval '7 hours 59 minutes' AND now() + interval '8 hours 1 minute'
                """) == 1)
            #expect(try await db.scalar("SELECT total FROM push.job_progress WHERE job_id = \(job)") == 1)
            let store = QueueStore(client: db.client, workerID: "la", logger: db.logger)
            #expect(try await store.expandNextDueJob(chunkSize: 1000) == nil, "a channel job is no broadcast over devices")
            #expect(try await store.expandDueSmallJobs(chunkSize: 1000, limit: 100) == 1)
            let chunks = try await store.claimChunks(ClaimBudget(room: 100, maximumChunks: 10), lease: .seconds(30))
            let chunk = try #require(chunks.first)
            #expect(chunks.count == 1 && chunk.tokens == ["Y2hhbm5lbA=="] && chunk.job.channelID == "Y2hhbm5lbA==")

            // Deleting by name marks the row for the worker; the name is free again once it is deleted.
            #expect(try await db.scalar("SELECT push.delete_channel('app', 'match-7')") == id)
            #expect(try await db.scalar("SELECT count(*) FROM push.channels WHERE state = 'deleting'") == 1)
            await #expect(throws: PSQLError.self) { try await db.exec("SELECT push.create_channel('app', 'match-7', storage_policy => 1)") }
            try await db.exec("UPDATE push.channels SET state = 'deleted', deleted_at = now() WHERE id = \(id)")
            #expect(try await db.scalar("SELECT push.create_channel('app', 'match-7', storage_policy => 0)") != id)
        }
    }

    @Test func aLoginGrantedOneAppSeesOnlyThatAppsChannels() async throws {
        try await TestDatabase.with { db in
            try await Self.setUp(db)
            try await db.createApp("other", topic: "com.example.other")
            try await db.exec("SELECT push.create_channel('app', 'mine')")
            try await db.exec("SELECT push.create_channel('other', 'theirs')")
            let role = try await db.createLogin(memberOf: "pgpush_producer")
            try await db.exec("SELECT push.grant_app(\(role), 'app')")
            let connection = try await db.connect(as: role)
            defer { Task { try? await connection.close() } }
            let names = try await connection.query("SELECT name FROM push.channels ORDER BY name", logger: db.logger).collect()
                .map { try $0.decode(String.self) }
            #expect(names == ["mine"])
            await #expect(throws: PSQLError.self) {
                try await connection.query("SELECT push.create_channel('other', 'sneaky')", logger: db.logger).collect()
            }
        }
    }

    @Test func expiredUpdateTokensAreRemovedWithAnAuditRowAndOthersStay() async throws {
        try await TestDatabase.with { db in
            try await Self.setUp(db)
            try await db.exec("UPDATE push.devices SET registered_at = now() - interval '13 hours'")
            let store = QueueStore(client: db.client, workerID: "la", logger: db.logger)
            #expect(try await store.expireActivityTokens(lifetime: .seconds(12 * 3600)) == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token_kind = 'activity'") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 5, "devices and push-to-start tokens stay")
            #expect(try await db.scalar("SELECT count(*) FROM push.pruned_devices WHERE reason = 'ActivityTokenExpired'") == 2)
            // A token registered again within the window stays.
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(31)), token_kind => 'activity', activity_id => 'order-3')")
            #expect(try await store.expireActivityTokens(lifetime: .seconds(12 * 3600)) == 0)
        }
    }
}
