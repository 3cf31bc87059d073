import Foundation
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The producer's SQL API for Android devices: apps with FCM credentials, devices with a platform, and the
/// Android message of a job, given explicitly or derived from the APNs payload at enqueue.
@Suite(.database, .timeLimit(.minutes(3)))
struct FCMProducerAPITests {
    static let fcmToken = "fYK3abcdEFGH:APA91bHqwe-_rty0123456789"

    /// An app with APNs and FCM ("dual"), one with FCM only ("droid") and one with APNs only ("app").
    static func createApps(_ db: TestDatabase) async throws {
        try await db.createApp("app")
        try await db.exec("""
            INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path, fcm_project_id, fcm_service_account_path)
            VALUES ('dual', 'com.example.dual', 'TEAM123456', 'KEY1234567', 'dual.p8', 'demo-project', 'dual-sa.json')
            """)
        try await db.exec("""
            INSERT INTO push.apps (id, fcm_project_id, fcm_service_account_path) VALUES ('droid', 'droid-project', 'droid-sa.json')
            """)
    }

    static func text(_ db: TestDatabase, _ query: PostgresQuery) async throws -> String? {
        for try await value in try await db.rows(query).decode(String?.self) { return value }
        return nil
    }

    static func json(_ text: String?) throws -> NSDictionary {
        let data = try #require(text?.data(using: .utf8))
        return try #require(try JSONSerialization.jsonObject(with: data) as? NSDictionary)
    }

    @Test func appsHoldFCMCredentialsBesideOrInsteadOfAPNs() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            #expect(try await db.scalar("SELECT count(*) FROM push.apps WHERE fcm_project_id IS NOT NULL") == 2)
            // Half an FCM credential, or no credential at all, is refused.
            for statement: PostgresQuery in [
                "INSERT INTO push.apps (id, fcm_project_id) VALUES ('half', 'p-1')",
                "INSERT INTO push.apps (id, fcm_service_account_path) VALUES ('half', 'sa.json')",
                "INSERT INTO push.apps (id) VALUES ('none')",
                // A topic without an APNs credential means nothing.
                "INSERT INTO push.apps (id, topic, fcm_project_id, fcm_service_account_path) VALUES ('t', 'com.x', 'p-1', 'sa.json')",
                "INSERT INTO push.apps (id, fcm_project_id, fcm_service_account_path) VALUES ('bad', 'Not A Project', 'sa.json')",
            ] {
                await #expect(throws: (any Error).self) { try await db.exec(statement) }
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.apps") == 3)
        }
    }

    @Test func androidDevicesKeepTheirTokenAsGivenAndIOSStaysTheDefault() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let upperHex = String(repeating: "AB", count: 32)
            try await db.exec("SELECT push.register_device('dual', \(upperHex), 'u1')")
            try await db.exec("SELECT push.register_device('dual', \(Self.fcmToken), 'u1', platform => 'android')")
            // A hex-looking registration token of an Android device is still Android's, and not lower-cased.
            let hexLooking = "ABCDEF0123456789ABCDEF"
            try await db.exec("SELECT push.register_device('droid', \(hexLooking), 'u2', '{}', NULL, 'android')")

            #expect(try await Self.text(db, "SELECT platform FROM push.devices WHERE token = \(upperHex.lowercased())") == "ios")
            #expect(try await Self.text(db, "SELECT platform FROM push.devices WHERE token = \(Self.fcmToken)") == "android")
            #expect(try await Self.text(db, "SELECT platform FROM push.devices WHERE token = \(hexLooking)") == "android")

            // The token's new registration replaces the old one, for Android as for iOS.
            let rotated = "rotatedToken_0123456789:ABC"
            try await db.exec("SELECT push.register_device('dual', \(rotated), 'u1', replaces => \(Self.fcmToken), platform => 'android')")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(Self.fcmToken)") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(rotated) AND platform = 'android'") == 1)
        }
    }

    @Test(arguments: [
        ("SELECT push.register_device('dual', 'short-token', platform => 'android')", "token is not a valid FCM registration token"),
        ("SELECT push.register_device('dual', 'has a space in it 0123456789', platform => 'android')", "token is not a valid FCM registration token"),
        ("SELECT push.register_device('dual', repeat('x', 1025), platform => 'android')", "token is not a valid FCM registration token"),
        ("SELECT push.register_device('dual', 'fYK3abcdEFGH:APA91bHqwe-_rty0123456789')", "token is not a valid device token"),
        ("SELECT push.register_device('dual', 'fYK3abcdEFGH:APA91bHqwe-_rty0123456789', platform => 'windows')", "platform must be 'ios', 'android' or 'web'"),
        ("SELECT push.register_device('dual', 'fYK3abcdEFGH:APA91bHqwe-_rty0123456789', platform => NULL)", "platform must be 'ios', 'android' or 'web'"),
        ("SELECT push.register_device('dual', 'fYK3abcdEFGH:APA91bHqwe-_rty0123456789', replaces => 'no', platform => 'android')", "replaces is not a valid FCM registration token"),
    ])
    func badDeviceRegistrationsAreRefused(_ statement: String, _ expected: String) async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            var message: String?
            do { try await db.exec(PostgresQuery(unsafeSQL: statement)) } catch { message = serverMessage(of: error) }
            let text = try #require(message, "accepted: \(statement)")
            #expect(text.contains(expected), "\(text)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }

    @Test func theAndroidMessageIsDerivedFromTheAPNsPayloadByTheDocumentedMapping() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let alert = try await db.scalar("""
                SELECT push.enqueue('dual', '{"aps":{"alert":{"title":"Shipped","body":"Order 42 is on its way"},"sound":"chime"},"order":42,"kind":"ship","meta":{"a":1}}',
                                    collapse_id => 'order-42')
                """)
            let derived = try Self.json(try await Self.text(db, "SELECT fcm::text FROM push.jobs WHERE id = \(alert)"))
            #expect(derived["notification"] as? NSDictionary == ["title": "Shipped", "body": "Order 42 is on its way"])
            #expect(derived["data"] as? NSDictionary == ["order": "42", "kind": "ship", "meta": #"{"a": 1}"#])
            #expect(derived["android"] as? NSDictionary
                    == ["priority": "HIGH", "collapse_key": "order-42", "notification": ["sound": "chime"]])

            // A string alert is the body; apns_priority 5 is NORMAL.
            let plain = try await db.scalar(#"SELECT push.enqueue('dual', '{"aps":{"alert":"Hello"}}', apns_priority => 5)"#)
            let plainMessage = try Self.json(try await Self.text(db, "SELECT fcm::text FROM push.jobs WHERE id = \(plain)"))
            #expect(plainMessage["notification"] as? NSDictionary == ["body": "Hello"])
            #expect(plainMessage["android"] as? NSDictionary == ["priority": "NORMAL"])

            // A background push is a data-only message at NORMAL priority.
            let background = try await db.scalar("""
                SELECT push.enqueue('dual', '{"aps":{"content-available":1},"sync":"inbox"}', push_type => 'background')
                """)
            let silent = try Self.json(try await Self.text(db, "SELECT fcm::text FROM push.jobs WHERE id = \(background)"))
            #expect(silent["notification"] == nil)
            #expect(silent["data"] as? NSDictionary == ["sync": "inbox"])
            #expect(silent["android"] as? NSDictionary == ["priority": "NORMAL"])

            // An app without FCM keeps no Android message.
            let apnsOnly = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}')"#)
            #expect(try await Self.text(db, "SELECT fcm::text FROM push.jobs WHERE id = \(apnsOnly)") == nil)
        }
    }

    @Test func anExplicitAndroidMessageIsKeptNormalisedAndAnAndroidOnlyAppNeedsNoAPS() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let id = try await db.scalar("""
                SELECT push.enqueue('droid', fcm => '{"notification":{"title":"Hi"},"data":{"n":"1"},"android":{"priority":"high","ttl":"3600s","collapse_key":"c"}}')
                """)
            let message = try Self.json(try await Self.text(db, "SELECT fcm::text FROM push.jobs WHERE id = \(id)"))
            #expect(message["android"] as? NSDictionary == ["priority": "HIGH", "ttl": "3600s", "collapse_key": "c"])
            #expect(message["data"] as? NSDictionary == ["n": "1"])
            #expect(try await Self.text(db, "SELECT payload::text FROM push.jobs WHERE id = \(id)") == "{}")

            // The explicit message wins over the derived one on an app with both.
            let dual = try await db.scalar("""
                SELECT push.enqueue('dual', '{"aps":{"alert":"ignored for Android"}}', fcm => '{"data":{"only":"this"}}')
                """)
            #expect(try await Self.text(db, "SELECT fcm::text FROM push.jobs WHERE id = \(dual)") == #"{"data": {"only": "this"}}"#)

            // A plain INSERT by a producer goes through the same validation.
            let producer = try await db.connect(asMemberOf: "pgpush_producer")
            do {
                _ = try await producer.query("""
                    INSERT INTO push.jobs (app_id, payload, fcm) VALUES ('droid', '{}', '{"android":{"priority":"normal"}}')
                    """, logger: db.logger).collect()
                try? await producer.close()
            } catch {
                try? await producer.close()
                throw error
            }
            #expect(try await db.scalar(#"SELECT count(*) FROM push.jobs WHERE fcm = '{"android":{"priority":"NORMAL"}}'"#) == 1)
        }
    }

    @Test func explicitTokenListsMayMixPlatformsOfTheApp() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let upperHex = String(repeating: "CD", count: 32)
            let id = try await db.scalar("""
                SELECT push.enqueue('dual', '{"aps":{"alert":"x"}}', tokens => ARRAY[\(Self.fcmToken), \(upperHex)])
                """)
            let tokens = try await db.rows("SELECT unnest(tokens) FROM push.jobs WHERE id = \(id) ORDER BY 1")
                .decode(String.self).reduce(into: [String]()) { $0.append($1) }
            #expect(Set(tokens) == [Self.fcmToken, upperHex.lowercased()])
        }
    }

    struct BadInput: Sendable, CustomStringConvertible {
        var description: String
        var statement: String
        var expected: String
    }

    static let badInputs: [BadInput] = [
        .init(description: "fcm not an object", statement: "SELECT push.enqueue('droid', fcm => '[1]')",
              expected: "fcm must be a JSON object"),
        .init(description: "a target", statement: #"SELECT push.enqueue('droid', fcm => '{"token":"abc"}')"#,
              expected: "fcm.token is not allowed"),
        .init(description: "a topic target", statement: #"SELECT push.enqueue('droid', fcm => '{"topic":"news"}')"#,
              expected: "fcm.topic is not allowed"),
        .init(description: "an unknown field", statement: #"SELECT push.enqueue('droid', fcm => '{"webpush":{}}')"#,
              expected: "fcm.webpush is not supported"),
        .init(description: "data value a number", statement: #"SELECT push.enqueue('droid', fcm => '{"data":{"n":1}}')"#,
              expected: "fcm.data.n must be a string"),
        .init(description: "data an array", statement: #"SELECT push.enqueue('droid', fcm => '{"data":["a"]}')"#,
              expected: "fcm.data must be a JSON object of strings"),
        .init(description: "reserved data key", statement: #"SELECT push.enqueue('droid', fcm => '{"data":{"from":"x"}}')"#,
              expected: "fcm.data.from is a key FCM reserves"),
        .init(description: "reserved google. key", statement: #"SELECT push.enqueue('droid', fcm => '{"data":{"google.c.a":"x"}}')"#,
              expected: "fcm.data.google.c.a is a key FCM reserves"),
        .init(description: "reserved key in android data", statement: #"SELECT push.enqueue('droid', fcm => '{"android":{"data":{"gcm.n":"x"}}}')"#,
              expected: "fcm.android.data.gcm.n is a key FCM reserves"),
        .init(description: "notification field unknown", statement: #"SELECT push.enqueue('droid', fcm => '{"notification":{"subtitle":"x"}}')"#,
              expected: "fcm.notification.subtitle is not a notification field"),
        .init(description: "notification title a number", statement: #"SELECT push.enqueue('droid', fcm => '{"notification":{"title":5}}')"#,
              expected: "fcm.notification.title must be a string"),
        .init(description: "ttl over four weeks", statement: #"SELECT push.enqueue('droid', fcm => '{"android":{"ttl":"2419201s"}}')"#,
              expected: "fcm.android.ttl 2419201s is over FCM's maximum"),
        .init(description: "ttl not a duration", statement: #"SELECT push.enqueue('droid', fcm => '{"android":{"ttl":"1h"}}')"#,
              expected: "fcm.android.ttl must be a duration"),
        .init(description: "ttl a number", statement: #"SELECT push.enqueue('droid', fcm => '{"android":{"ttl":3600}}')"#,
              expected: "fcm.android.ttl must be a duration"),
        .init(description: "priority unknown", statement: #"SELECT push.enqueue('droid', fcm => '{"android":{"priority":"urgent"}}')"#,
              expected: "fcm.android.priority must be"),
        .init(description: "android field unknown", statement: #"SELECT push.enqueue('droid', fcm => '{"android":{"color":"red"}}')"#,
              expected: "fcm.android.color is not an AndroidConfig field"),
        .init(description: "message over 4096 bytes",
              statement: "SELECT push.enqueue('droid', fcm => jsonb_build_object('data', jsonb_build_object('x', repeat('a', 4100))))",
              expected: "over FCM's 4096-byte limit"),
        .init(description: "fcm for an app without FCM",
              statement: #"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', fcm => '{"data":{"a":"b"}}')"#,
              expected: "fcm is given, but app app has no FCM credentials"),
        .init(description: "a payload key FCM reserves, derived",
              statement: #"SELECT push.enqueue('dual', '{"aps":{"alert":"x"},"message_type":"y"}')"#,
              expected: #"payload key "message_type" cannot become FCM data"#),
        .init(description: "a dual app still needs aps",
              statement: #"SELECT push.enqueue('dual', '{"x":"y"}')"#,
              expected: #"payload has no "aps" dictionary"#),
        .init(description: "an FCM token for an APNs-only app",
              statement: "SELECT push.enqueue('app', '{\"aps\":{}}', tokens => ARRAY['\(fcmToken)'])",
              expected: "tokens contains an invalid device token 'fYK3abcdEFGH…': a token is 64 to 200 hex characters"),
        .init(description: "a malformed token for a dual app",
              statement: "SELECT push.enqueue('dual', '{\"aps\":{}}', tokens => ARRAY['bad token'])",
              expected: "an FCM registration token 16 to 1024"),
    ]

    @Test(arguments: badInputs)
    func badAndroidInputIsRefusedNamingTheFieldAndLeavesNothingBehind(_ input: BadInput) async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            var message: String?
            do { try await db.exec(PostgresQuery(unsafeSQL: input.statement)) } catch { message = serverMessage(of: error) }
            let text = try #require(message, "\(input.description) was accepted")
            #expect(text.contains(input.expected), "\(input.description): \(text)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    /// A chunk holds one platform's tokens, so an Android token never reaches APNs nor an iOS one FCM; each
    /// platform only for an app with that provider's credential.
    @Test func everyDeviceIsExpandedIntoAChunkOfItsOwnPlatform() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let iosToken = TestTokens.token(1)
            try await db.exec("SELECT push.register_device('dual', \(iosToken), 'u1')")
            try await db.exec("SELECT push.register_device('dual', \(Self.fcmToken), 'u1', platform => 'android')")
            try await db.exec("SELECT push.register_device('droid', \(Self.fcmToken), 'u1', platform => 'android')")
            // An iOS device of the Android-only app is reached by no provider.
            try await db.exec("INSERT INTO push.devices (app_id, token, user_id) VALUES ('droid', \(TestTokens.token(2)), 'u1')")
            try await db.exec(#"SELECT push.enqueue('dual', '{"aps":{"alert":"small"}}', user_ids => ARRAY['u1'])"#)
            try await db.exec("""
                SELECT push.enqueue('dual', '{"aps":{"alert":"list"}}', tokens => ARRAY[\(Self.fcmToken), \(iosToken)])
                """)
            try await db.exec(#"SELECT push.enqueue('droid', fcm => '{"data":{"a":"b"}}', user_ids => ARRAY['u1'])"#)
            // push.job_progress counts each platform's part of the audience before expansion, then keeps the
            // expansion's figures: the Android-only app's iOS device is reached by no provider.
            func totals() async throws -> [[Int64?]] {
                try await db.rows("SELECT ios_total, android_total, ios_pending, android_pending FROM push.job_progress ORDER BY job_id")
                    .decode((Int64?, Int64?, Int64?, Int64?).self).reduce(into: []) { $0.append([$1.0, $1.1, $1.2, $1.3]) }
            }
            #expect(try await totals() == [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])

            let store = QueueStore(client: db.client, workerID: "fcm-test", logger: db.logger)
            #expect(try await store.expandDueSmallJobs(chunkSize: 1000, limit: 100) == 3)
            #expect(try await totals() == [[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 0, 1]])
            // A job expanded before the per-platform counters existed has no per-platform figures.
            try await db.exec("UPDATE push.jobs SET android_total = NULL WHERE app_id = 'droid'")
            #expect(try await totals().last == [nil, nil, nil, nil])
            func tokens(_ platform: String) async throws -> [String] {
                try await db.rows("SELECT unnest(tokens) FROM push.chunks WHERE platform = \(platform) ORDER BY 1")
                    .decode(String.self).reduce(into: [String]()) { $0.append($1) }
            }
            #expect(try await tokens("ios") == [iosToken, iosToken])
            #expect(try await tokens("android") == [Self.fcmToken, Self.fcmToken, Self.fcmToken])

            // A broadcast's key ranges: one per platform.
            try await db.exec("DELETE FROM push.chunks")
            try await db.exec(#"SELECT push.enqueue('dual', '{"aps":{"alert":"all"}}')"#)
            let expansion = try #require(try await store.expandNextDueJob(chunkSize: 1000))
            #expect(expansion.total == 2)
            #expect(try await db.scalar("SELECT android_total FROM push.job_progress WHERE job_id = \(expansion.jobID)") == 1)
            #expect(try await db.scalar("SELECT ios_total FROM push.job_progress WHERE job_id = \(expansion.jobID)") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.chunks WHERE kind = 'range'") == 2)
            #expect(try await db.scalar("SELECT count(DISTINCT platform) FROM push.chunks WHERE kind = 'range'") == 2)
        }
    }

    @Test func deliveryStatsShowThePlatform() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, attempt, sent_at, platform)
                VALUES (1, 'dual', \(Self.fcmToken), 404, 'UNREGISTERED', 1, now(), 'android'),
                       (1, 'dual', \(TestTokens.token(1)), 200, NULL, 1, now(), 'ios')
                """)
            #expect(try await db.scalar("SELECT count FROM push.delivery_stats WHERE platform = 'android' AND reason = 'UNREGISTERED'") == 1)
            #expect(try await db.scalar("SELECT count FROM push.delivery_stats WHERE platform = 'ios' AND status = 200") == 1)
        }
    }
}
