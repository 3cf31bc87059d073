import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Every bad input a producer can send is refused with a message naming the field, and leaves nothing behind.
@Suite(.database, .timeLimit(.minutes(3)))
struct EnqueueValidationTests {
    struct Case: Sendable, CustomStringConvertible {
        var description: String
        var call: @Sendable (TestDatabase) async throws -> Void
        var expectedMessage: String
    }

    static let cases: [Case] = [
        Case(description: "payload not an object", call: { db in
            try await db.exec("SELECT push.enqueue('app', '[1,2]')")
        }, expectedMessage: "payload must be a JSON object"),
        Case(description: "payload a string", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '"hi"')"#)
        }, expectedMessage: "payload must be a JSON object"),
        Case(description: "no aps", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"alert":"x"}')"#)
        }, expectedMessage: "payload has no \"aps\" dictionary"),
        Case(description: "aps not a dictionary", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":"x"}')"#)
        }, expectedMessage: "payload has no \"aps\" dictionary"),
        Case(description: "payload over 4096 bytes", call: { db in
            try await db.exec(
                "SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4080))))")
        }, expectedMessage: "over the 4096-byte limit for push_type alert"),
        Case(description: "voip payload over 5120 bytes", call: { db in
            try await db.exec(
                "SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 5110))), push_type => 'voip')")
        }, expectedMessage: "over the 5120-byte limit for push_type voip"),
        Case(description: "malformed token", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', tokens => ARRAY['xyz'])"#)
        }, expectedMessage: "tokens contains an invalid device token"),
        Case(description: "token too short", call: { db in
            try await db.exec(
                #"SELECT push.enqueue('app', '{"aps":{}}', tokens => ARRAY[repeat('a', 63)])"#)
        }, expectedMessage: "tokens contains an invalid device token"),
        Case(description: "token too long", call: { db in
            try await db.exec(
                #"SELECT push.enqueue('app', '{"aps":{}}', tokens => ARRAY[repeat('a', 201)])"#)
        }, expectedMessage: "tokens contains an invalid device token"),
        Case(description: "unknown app", call: { db in
            try await db.exec(#"SELECT push.enqueue('nope', '{"aps":{}}')"#)
        }, expectedMessage: "unknown app_id: nope"),
        Case(description: "bad push type", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', push_type => 'sms')"#)
        }, expectedMessage: "push_type 'sms' is not one of APNs' push types"),
        Case(description: "bad apns priority", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', apns_priority => 7)"#)
        }, expectedMessage: "apns_priority 7 is not valid"),
        Case(description: "priority 10 for background", call: { db in
            try await db.exec(
                #"SELECT push.enqueue('app', '{"aps":{"content-available":1}}', push_type => 'background', apns_priority => 10)"#)
        }, expectedMessage: "apns_priority 10 is not allowed for push_type background"),
        // Outside a smallint: refused by push.enqueue itself, not by the column's "smallint out of range".
        Case(description: "apns priority outside smallint", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', apns_priority => -2147483648)"#)
        }, expectedMessage: "apns_priority -2147483648 is not valid"),
        Case(description: "idempotency key over 255 bytes", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', idempotency_key => repeat('ü', 2000))"#)
        }, expectedMessage: "idempotency_key is 4000 bytes, over the 255-byte limit"),
        Case(description: "collapse id over 64 bytes", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', collapse_id => repeat('é', 33))"#)
        }, expectedMessage: "collapse_id is 66 bytes, over the 64-byte limit"),
        Case(description: "expires_at in the past", call: { db in
            try await db.exec(
                #"SELECT push.enqueue('app', '{"aps":{}}', expires_at => now() - interval '1 second')"#)
        }, expectedMessage: "expires_at"),
        Case(description: "empty token list", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', tokens => '{}')"#)
        }, expectedMessage: "tokens is an empty list"),
        Case(description: "empty user list", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', user_ids => '{}')"#)
        }, expectedMessage: "user_ids must be a non-empty list"),
        Case(description: "empty tag list", call: { db in
            try await db.exec(#"SELECT push.enqueue('app', '{"aps":{}}', tags => '{}')"#)
        }, expectedMessage: "tags must be a non-empty list"),
        Case(description: "two audiences", call: { db in
            try await db.exec(
                #"SELECT push.enqueue('app', '{"aps":{}}', user_ids => '{u1}', tags => '{t}')"#)
        }, expectedMessage: "give at most one audience"),
        Case(description: "plain INSERT without aps", call: { db in
            try await db.exec(#"INSERT INTO push.jobs (app_id, payload) VALUES ('app', '{"x":1}')"#)
        }, expectedMessage: "payload has no \"aps\" dictionary"),
        Case(description: "plain INSERT with bad token", call: { db in
            try await db.exec(
                #"INSERT INTO push.jobs (app_id, payload, tokens) VALUES ('app', '{"aps":{}}', ARRAY['zz'])"#)
        }, expectedMessage: "tokens contains an invalid device token"),
        Case(description: "plain INSERT with unknown app", call: { db in
            try await db.exec(#"INSERT INTO push.jobs (app_id, payload) VALUES ('ghost', '{"aps":{}}')"#)
        }, expectedMessage: "unknown app_id: ghost"),
        Case(description: "plain INSERT with bad priority", call: { db in
            try await db.exec(
                #"INSERT INTO push.jobs (app_id, payload, apns_priority) VALUES ('app', '{"aps":{}}', 3)"#)
        }, expectedMessage: "apns_priority 3 is not valid"),
    ]

    @Test(arguments: cases)
    func rejectsBadInputAndLeavesNothingBehind(_ testCase: Case) async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            var message: String?
            do {
                try await testCase.call(db)
            } catch {
                message = serverMessage(of: error)
            }
            let text = try #require(message, "\(testCase.description) was accepted")
            #expect(text.contains(testCase.expectedMessage), "\(testCase.description): \(text)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks") == 0)
        }
    }

    @Test func failedEnqueueInsideProducerTransactionRollsBackTheProducersOwnWrites() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            try await db.exec("CREATE TABLE orders (id int)")
            await #expect(throws: (any Error).self) {
                try await db.client.withTransaction(logger: db.logger) { connection in
                    _ = try await connection.query("INSERT INTO orders VALUES (1)", logger: db.logger).collect()
                    _ = try await connection.query(#"SELECT push.enqueue('app', '{"aps":{}}', push_type => 'fax')"#, logger: db.logger).collect()
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM orders") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }
}
