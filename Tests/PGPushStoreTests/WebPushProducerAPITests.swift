import Foundation
import PGPushCore
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The producer's SQL API for Web Push: apps with a VAPID key, web subscriptions registered as browsers hand
/// them over, and a job's web message, given or derived, with every refusal naming its field and leaving no row.
@Suite(.database, .timeLimit(.minutes(3)))
struct WebPushProducerAPITests {
    static let endpoint = "https://fcm.googleapis.com/fcm/send/dGVzdC1zdWJzY3JpcHRpb24"
    /// A P-256 point, as a browser's p256dh is.
    static let p256dh = VAPIDKey.generate().applicationServerKey
    static let auth = WebPushBase64URL.encode(Array(repeating: 7, count: 16))
    static let vapid = VAPIDKey.generate()

    static func subscription(endpoint: String = endpoint, p256dh: String = p256dh, auth: String = auth) -> String {
        #"{"endpoint": "\#(endpoint)", "expirationTime": null, "keys": {"p256dh": "\#(p256dh)", "auth": "\#(auth)"}}"#
    }

    /// "web": APNs and Web Push; "app": APNs only.
    static func createApps(_ db: TestDatabase) async throws {
        try await db.createApp("app")
        try await db.createApp("web")
        try await db.exec("""
            UPDATE push.apps SET vapid_private_key_path = 'vapid.pem', vapid_public_key = \(vapid.applicationServerKey),
                   vapid_subject = 'mailto:ops@example.com'
             WHERE id = 'web'
            """)
    }

    static func text(_ db: TestDatabase, _ query: PostgresQuery) async throws -> String? {
        for try await value in try await db.rows(query).decode(String?.self) { return value }
        return nil
    }

    static func refusal(_ db: TestDatabase, _ statement: String) async throws -> String {
        var message: String?
        do { try await db.exec(PostgresQuery(unsafeSQL: statement)) } catch { message = serverMessage(of: error) }
        return try #require(message, "accepted: \(statement)")
    }

    @Test(arguments: [
        ("mailto:ops@localhost", "on localhost"),
        ("mailto: ops@example.com", "whitespace"),
        ("mailto:<ops@example.com>", "angle brackets"),
        ("https://push.example.local/contact", "a .local host"),
        ("mailto:ops@example", "not a real domain"),
        ("mailto:ops@127.0.0.1", "IP address"),
        ("ops@example.com", "does not start with mailto: or https:"),
    ])
    func aSubjectApplesPushServiceRefusesIsRefusedWithWhy(_ subject: String, _ why: String) async throws {
        try await TestDatabase.with { db in
            let message = try await Self.refusal(db, """
                INSERT INTO push.apps (id, vapid_private_key_path, vapid_public_key, vapid_subject)
                VALUES ('w', 'vapid.pem', '\(Self.vapid.applicationServerKey)', '\(subject)')
                """)
            #expect(message.contains("vapid_subject") && message.contains("BadJwtToken") && message.contains(why), "\(message)")
            #expect(try await db.scalar("SELECT count(*) FROM push.apps") == 0)
        }
    }

    @Test func appsHoldAVAPIDKeyBesideOrInsteadOfOtherProviders() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            // A web-only app, with an https subject.
            try await db.exec("""
                INSERT INTO push.apps (id, vapid_private_key_path, vapid_public_key, vapid_subject)
                VALUES ('site', 'site.pem', \(Self.vapid.applicationServerKey), 'https://www.example.com/contact')
                """)
            for (statement, expected) in [
                ("INSERT INTO push.apps (id, vapid_private_key_path) VALUES ('half', 'k.pem')", "apps_vapid_complete"),
                ("INSERT INTO push.apps (id, vapid_private_key_path, vapid_public_key, vapid_subject) VALUES ('bad', 'k.pem', 'BAAA', 'mailto:ops@example.com')",
                 "vapid_public_key is not a base64url uncompressed P-256 public key"),
                ("UPDATE push.apps SET vapid_subject = 'mailto:ops@localhost' WHERE id = 'web'", "on localhost"),
            ] {
                let message = try await Self.refusal(db, statement)
                #expect(message.contains(expected), "\(message)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.apps") == 3)
            #expect(try await Self.text(db, "SELECT vapid_subject FROM push.apps WHERE id = 'web'") == "mailto:ops@example.com")
        }
    }

    @Test func aSubscriptionIsRegisteredAsTheBrowserHandsItOver() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            try await db.exec("""
                SELECT push.register_device(app_id => 'web', platform => 'web', subscription => \(Self.subscription())::jsonb,
                                            user_id => 'u1', tags => '{news}')
                """)
            #expect(try await Self.text(db, "SELECT platform FROM push.devices WHERE token = \(Self.endpoint)") == "web")
            #expect(try await Self.text(db, "SELECT web_p256dh FROM push.devices WHERE token = \(Self.endpoint)") == Self.p256dh)
            #expect(try await Self.text(db, "SELECT web_auth FROM push.devices WHERE token = \(Self.endpoint)") == Self.auth)
            // The token may be given when it is the endpoint; padded base64url is taken and stored unpadded.
            try await db.exec("""
                SELECT push.register_device(app_id => 'web', token => \(Self.endpoint), platform => 'web',
                                            subscription => \(Self.subscription(auth: Self.auth + "=="))::jsonb)
                """)
            #expect(try await Self.text(db, "SELECT web_auth FROM push.devices WHERE token = \(Self.endpoint)") == Self.auth)
            // A browser that subscribes again replaces its old endpoint, keeping its place.
            let renewed = Self.endpoint + "-renewed"
            try await db.exec("""
                SELECT push.register_device(app_id => 'web', platform => 'web', subscription => \(Self.subscription(endpoint: renewed))::jsonb,
                                            replaces => \(Self.endpoint))
                """)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE platform = 'web'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(renewed)") == 1)
        }
    }

    @Test(arguments: [
        (subscription(endpoint: "http://fcm.googleapis.com/fcm/send/x"), "subscription.endpoint is not an https URL"),
        (subscription(endpoint: "https://user:secret@fcm.googleapis.com/fcm/send/x"), "subscription.endpoint has user info"),
        (subscription(endpoint: "https://fcm.googleapis.com/" + String(repeating: "x", count: 2048)), "subscription.endpoint is 2075 characters"),
        (subscription(endpoint: "https:///nohost"), "subscription.endpoint is not an https URL"),
        // A point off the curve: the last byte of Y changed.
        (subscription(p256dh: offCurve), "subscription.keys.p256dh is not a base64url uncompressed P-256 public key"),
        (subscription(p256dh: String(p256dh.dropLast(4))), "subscription.keys.p256dh is not a base64url uncompressed P-256 public key"),
        (subscription(p256dh: "not base64!"), "subscription.keys.p256dh is not"),
        (subscription(auth: WebPushBase64URL.encode(Array(repeating: 1, count: 15))), "subscription.keys.auth is not 16 bytes"),
        (#"{"endpoint": "https://fcm.googleapis.com/fcm/send/x", "keys": {"p256dh": "\#(p256dh)"}}"#, "subscription.keys.auth is not 16 bytes"),
        (#"{"endpoint": "https://fcm.googleapis.com/fcm/send/x"}"#, "subscription.keys is required"),
        (#"{"keys": {}}"#, "subscription.endpoint is required"),
        (#""https://fcm.googleapis.com/fcm/send/x""#, "subscription must be a JSON object"),
    ])
    func aBadSubscriptionIsRefusedWithItsFieldAndLeavesNoRow(_ subscription: String, _ expected: String) async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let message = try await Self.refusal(db, """
                SELECT push.register_device(app_id => 'web', platform => 'web', subscription => '\(subscription.replacingOccurrences(of: "'", with: "''"))'::jsonb)
                """)
            #expect(message.contains(expected), "\(message)")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }

    static var offCurve: String {
        var bytes = WebPushBase64URL.decode(p256dh)!
        bytes[64] ^= 1
        return WebPushBase64URL.encode(bytes)
    }

    @Test func registrationsThatDoNotFitWebPushAreRefused() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            for (statement, expected) in [
                ("SELECT push.register_device(app_id => 'app', platform => 'web', subscription => '\(Self.subscription())'::jsonb)",
                 "app app has no Web Push configured"),
                ("SELECT push.register_device(app_id => 'web', platform => 'web')", "subscription is required for platform 'web'"),
                ("SELECT push.register_device(app_id => 'web', token => 'https://other.example/x', platform => 'web', subscription => '\(Self.subscription())'::jsonb)",
                 "token must equal subscription.endpoint"),
                ("SELECT push.register_device(app_id => 'web', token => '\(String(repeating: "ab", count: 32))', subscription => '\(Self.subscription())'::jsonb)",
                 "subscription is a Web Push subscription: platform must be 'web'"),
                ("SELECT push.register_device(app_id => 'web', platform => 'web', subscription => '\(Self.subscription())'::jsonb, replaces => 'not-a-url')",
                 "replaces is not a Web Push endpoint"),
                ("SELECT push.register_device(app_id => 'web', platform => 'web', subscription => '\(Self.subscription())'::jsonb, token_kind => 'activity', activity_id => 'a')",
                 "platform must be 'ios'"),
            ] {
                let message = try await Self.refusal(db, statement)
                #expect(message.contains(expected), "\(message)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
        }
    }

    @Test func theWebMessageIsDerivedFromTheAPNsAlertWhenNoneIsGiven() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let job = try await db.scalar("""
                SELECT push.enqueue('web', '{"aps":{"alert":{"title":"Shipped","body":"Order 42"}},"order":42}')
                """)
            #expect(try await Self.text(db, "SELECT web::text FROM push.jobs WHERE id = \(job)")
                    == #"{"body": "Order 42", "data": {"order": 42}, "title": "Shipped"}"#)
            #expect(try await Self.text(db, "SELECT web_urgency FROM push.jobs WHERE id = \(job)") == "high")
            let quiet = try await db.scalar(#"SELECT push.enqueue('web', '{"aps":{"alert":"Hi"}}', apns_priority => 5)"#)
            #expect(try await Self.text(db, "SELECT web::text FROM push.jobs WHERE id = \(quiet)") == #"{"body": "Hi"}"#)
            #expect(try await Self.text(db, "SELECT web_urgency FROM push.jobs WHERE id = \(quiet)") == "normal")
            // Given, it is kept as given; a Declarative Web Push message too.
            let declarative = try await db.scalar("""
                SELECT push.enqueue('web', '{"aps":{"alert":"Hi"}}', web_urgency => 'very-low',
                    web => '{"web_push": 8030, "notification": {"title": "Hi", "navigate": "https://www.example.com/inbox"}}')
                """)
            #expect(try await Self.text(db, "SELECT web_urgency FROM push.jobs WHERE id = \(declarative)") == "very-low")
            #expect(try await db.scalar("SELECT (web ->> 'web_push')::int8 FROM push.jobs WHERE id = \(declarative)") == 8030)
            // An app without Web Push gets no web message.
            let plain = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"Hi"}}')"#)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(plain) AND web IS NULL AND web_urgency IS NULL") == 1)
        }
    }

    @Test(arguments: [
        (#"web => '{"text": "\#(String(repeating: "x", count: 3990))"}'"#, "web is 4002 bytes, over Web Push's 3993-byte limit"),
        (#"web => '{"web_push": 8030, "notification": {"navigate": "https://www.example.com/"}}'"#, "web.notification.title is required"),
        (#"web => '{"web_push": 8030, "notification": {"title": "Hi"}}'"#, "web.notification.navigate is required"),
        (#"web => '{"web_push": 8030, "notification": {"title": "Hi", "navigate": "http://www.example.com/"}}'"#, "web.notification.navigate is required"),
        (#"web => '{"web_push": 8030}'"#, "web.notification is required"),
        (#"web => '{"web_push": 1, "notification": {"title": "Hi", "navigate": "https://www.example.com/"}}'"#, "web.web_push must be 8030"),
        (#"web => '"just text"'"#, "web must be a JSON object"),
        (#"web_urgency => 'urgent'"#, "web_urgency 'urgent' is not valid"),
    ])
    func aBadWebMessageIsRefusedAtEnqueueWithItsFieldAndLeavesNoJob(_ argument: String, _ expected: String) async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let message = try await Self.refusal(db, #"SELECT push.enqueue('web', '{"aps":{"alert":"Hi"}}', "# + argument + ")")
            #expect(message.contains(expected), "\(message)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    @Test func aWebMessageForAnAppWithoutWebPushIsRefused() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            // Only a web message, to an app that has iOS devices too: the refusal says what is missing.
            let missing = try await Self.refusal(db, #"SELECT push.enqueue('web', web => '{"title": "Hi"}')"#)
            #expect(missing.contains("app web has APNs credentials, so its iOS devices need a payload"), "\(missing)")
            let message = try await Self.refusal(db, #"SELECT push.enqueue('app', '{"aps":{"alert":"Hi"}}', web => '{"title": "Hi"}')"#)
            #expect(message.contains("web is given, but app app has no Web Push configured"), "\(message)")
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
        }
    }

    @Test func aResendOfFailedSubscriptionsKeepsTheJobsWebMessage() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            try await db.exec("""
                SELECT push.register_device(app_id => 'web', platform => 'web', subscription => \(Self.subscription())::jsonb)
                """)
            let job = try await db.scalar("""
                SELECT push.enqueue('web', '{"aps":{"alert":"Hi"}}', web => '{"title": "Given", "body": "as given"}', web_urgency => 'low')
                """)
            try await db.exec("UPDATE push.jobs SET state = 'done', finished_at = now(), total = 1, failed = 1 WHERE id = \(job)")
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at, platform)
                VALUES (\(job), 'web', \(Self.endpoint), 503, 'HTTP503', gen_random_uuid(), 5, now(), 'web')
                """)
            let resent = try await db.scalar("SELECT push.resend_failed(\(job))")
            #expect(try await Self.text(db, "SELECT web::text FROM push.jobs WHERE id = \(resent)") == #"{"body": "as given", "title": "Given"}"#)
            #expect(try await Self.text(db, "SELECT web_urgency FROM push.jobs WHERE id = \(resent)") == "low")
            #expect(try await db.scalar("SELECT web_total FROM push.job_progress WHERE job_id = \(resent)") == 1)
        }
    }

    @Test func aJobCountsItsWebSubscriptionsApartFromIOSAndAndroid() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            try await db.exec("SELECT push.register_device('web', \(String(repeating: "ab", count: 32)))")
            for index in 0..<3 {
                try await db.exec("""
                    SELECT push.register_device(app_id => 'web', platform => 'web',
                                                subscription => \(Self.subscription(endpoint: Self.endpoint + "\(index)"))::jsonb)
                    """)
            }
            let broadcast = try await db.scalar(#"SELECT push.enqueue('web', '{"aps":{"alert":"Hi"}}')"#)
            #expect(try await db.scalar("SELECT ios_total + 10 * web_total FROM push.job_progress WHERE job_id = \(broadcast)") == 31)
            // A token list names endpoints among device tokens.
            let listed = try await db.scalar("""
                SELECT push.enqueue('web', '{"aps":{"alert":"Hi"}}', tokens => ARRAY[\(Self.endpoint + "0"), \(String(repeating: "cd", count: 32))])
                """)
            #expect(try await db.scalar("SELECT ios_total + 10 * web_total FROM push.job_progress WHERE job_id = \(listed)") == 11)
        }
    }
}
