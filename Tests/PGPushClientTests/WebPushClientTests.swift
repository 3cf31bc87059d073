import Foundation
import Logging
import PGPushClient
import PGPushTestSupport
import PostgresNIO
import Testing

/// The Swift client's Web Push calls against the real schema, as a `pgpush_producer` login: a subscription as a
/// website's backend receives it, a job with a web message and urgency, and the web counts of its progress.
@Suite(.database, .timeLimit(.minutes(2)))
struct WebPushClientTests {
    /// RFC 8291's example keys: the application server's (a valid VAPID public key) and the user agent's.
    static let vapidPublicKey = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    static let p256dh = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    static func endpoint(_ index: Int) -> String {
        "https://fcm.googleapis.com/fcm/send/web-test-\(index)"
    }

    /// App "news" with APNs and Web Push, and `body` run with a client of a `pgpush_producer` login.
    static func withProducer(_ body: @Sendable (TestDatabase, PGPushClient) async throws -> Void) async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news", topic: "com.example.news")
            try await db.exec("""
                UPDATE push.apps SET vapid_private_key_path = '/nonexistent/vapid.pem', vapid_public_key = \(vapidPublicKey),
                       vapid_subject = 'mailto:ops@example.com'
                 WHERE id = 'news'
                """)
            let login = try await db.createLogin(memberOf: "pgpush_producer")
            try await withTestClient(db.urlString(user: login), maximumConnections: 4, logger: db.logger) { postgres in
                try await body(db, PGPushClient(postgres, logger: db.logger))
            }
        }
    }

    @Test func aSubscriptionDecodedFromTheBrowsersJSONRegistersAsAWebDevice() async throws {
        try await Self.withProducer { db, push in
            // What the website's JavaScript posts: subscription.toJSON(), with a field the client does not know.
            let posted = #"{"endpoint": "\#(Self.endpoint(1))", "expirationTime": null, "keys": {"p256dh": "\#(Self.p256dh)", "auth": "\#(Self.auth)"}, "extra": 1}"#
            let subscription = try JSONDecoder().decode(PushSubscription.self, from: Data(posted.utf8))
            #expect(subscription.keys.auth == Self.auth)
            #expect(subscription.expirationTime == nil)
            #expect(!subscription.description.contains("web-test"), "description shows only the host: \(subscription)")

            try await push.registerWebPush(app: "news", subscription: subscription, userID: "user-1", tags: ["sports"])
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE app_id = 'news' AND platform = 'web' AND token = \(Self.endpoint(1))
                   AND user_id = 'user-1' AND tags = ARRAY['sports'] AND web_p256dh IS NOT NULL AND web_auth IS NOT NULL
                """) == 1)

            // The browser's pushsubscriptionchange: the new subscription replaces the old endpoint.
            let renewed = PushSubscription(
                endpoint: Self.endpoint(2), keys: .init(p256dh: Self.p256dh, auth: Self.auth), expirationTime: 1_900_000_000_000)
            try await push.registerWebPush(app: "news", subscription: renewed, userID: "user-1", replaces: Self.endpoint(1))
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE platform = 'web'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE token = \(Self.endpoint(2))") == 1)
        }
    }

    @Test func aBadSubscriptionIsRefusedWithItsField() async throws {
        try await Self.withProducer { _, push in
            let badAuth = PushSubscription(endpoint: Self.endpoint(1), keys: .init(p256dh: Self.p256dh, auth: "c2hvcnQ"))
            let refusal = await #expect(throws: PGPushClientError.self) {
                try await push.registerWebPush(app: "news", subscription: badAuth)
            }
            #expect(refusal?.code == .invalidInput)
            #expect(refusal?.field == "subscription")
            #expect(refusal?.message.contains("keys.auth") == true, "\(String(describing: refusal))")

            let plainHTTP = PushSubscription(
                endpoint: "http://push.example.net/x", keys: .init(p256dh: Self.p256dh, auth: Self.auth))
            let http = await #expect(throws: PGPushClientError.self) {
                try await push.registerWebPush(app: "news", subscription: plainHTTP)
            }
            #expect(http?.code == .invalidInput && http?.field == "subscription")

            let unknownApp = await #expect(throws: PGPushClientError.self) {
                try await push.registerWebPush(app: "nope", subscription: badAuth)
            }
            #expect(unknownApp?.code == .unknown)
        }
    }

    @Test func aJobWithAWebMessageAndUrgencyReportsItsWebCounts() async throws {
        try await Self.withProducer { db, push in
            let job = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(APNsPayload(alert: .init(title: "Goal!"))),
                web: ["title": "Goal!", "body": "2-1 in the 89th", "data": ["match": 77]], webUrgency: .high))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(job) AND web_urgency = 'high'
                   AND web = '{"title": "Goal!", "body": "2-1 in the 89th", "data": {"match": 77}}'::jsonb
                """) == 1)

            // A worker's counts: 3 iOS devices and 2 browsers, one of which failed.
            try await db.exec("""
                UPDATE push.jobs SET state = 'running', started_at = now(), audience_at = now(), total = 5,
                       android_total = 0, web_total = 2
                 WHERE id = \(job)
                """)
            try await db.exec("""
                UPDATE push.jobs SET state = 'done', delivered = 4, failed = 1, answered = 5, web_delivered = 1,
                       web_failed = 1, first_sent_at = now(), finished_at = now()
                 WHERE id = \(job)
                """)
            let progress = try #require(try await push.jobProgress(jobID: job))
            #expect(progress.webTotal == 2)
            #expect(progress.webDelivered == 1)
            #expect(progress.webFailed == 1)
            #expect(progress.webPending == 0)
            #expect(progress.iosTotal == 3)
            #expect(progress.iosDelivered == 3)
            #expect(progress.androidTotal == 0)

            // A Web-only app's job needs no APNs payload; an urgency the database does not know is refused, named.
            try await db.exec("""
                INSERT INTO push.apps (id, environment, vapid_private_key_path, vapid_public_key, vapid_subject)
                VALUES ('news-web', 'production', '/nonexistent/vapid.pem', \(Self.vapidPublicKey), 'mailto:ops@example.com')
                """)
            let webOnly = try await push.enqueue(EnqueueRequest(app: "news-web", web: ["title": "Hi"], webUrgency: .veryLow))
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(webOnly) AND web ->> 'title' = 'Hi' AND web_urgency = 'very-low'") == 1)
            let urgency = await #expect(throws: PGPushClientError.self) {
                try await push.enqueue(EnqueueRequest(app: "news-web", web: ["title": "Hi"], webUrgency: WebUrgency(rawValue: "soon")))
            }
            #expect(urgency?.code == .invalidInput && urgency?.field == "web_urgency", "\(String(describing: urgency))")
        }
    }
}
