import Crypto
import Foundation
import Logging
import PGPushCore
@testable import PGPushDispatcher
import PGPushTestSupport
import Testing

/// The Web Push client's decisions that need no push service: which origins it refuses before connecting, the
/// headers it sends, and how it reads an answer.
@Suite struct WebPushClientTests {
    static func subscription(endpoint: String) throws -> WebPushSubscription {
        let browser = P256.KeyAgreement.PrivateKey()
        return try WebPushSubscription(
            endpoint: endpoint, keys: .init(p256dh: Array(browser.publicKey.x963Representation), auth: Array(repeating: 7, count: 16)))
    }

    static func message(to endpoint: String) throws -> WebPushMessage {
        WebPushMessage(subscription: try subscription(endpoint: endpoint), plaintext: Array(#"{"title":"Hi"}"#.utf8), timeToLive: 60)
    }

    @Test func metricsLabelAnEndpointByItsOriginNeverItsPath() {
        #expect(WorkerMetrics.webPushOrigin(of: "https://fcm.googleapis.com/fcm/send/abc:def") == "https://fcm.googleapis.com")
        #expect(WorkerMetrics.webPushOrigin(of: "https://127.0.0.1:2199/push/secret-id") == "https://127.0.0.1:2199")
        #expect(WorkerMetrics.webPushOrigin(of: "https://web.push.apple.com?x=1") == "https://web.push.apple.com")
        #expect(WorkerMetrics.webPushOrigin(of: "https://updates.push.services.mozilla.com") == "https://updates.push.services.mozilla.com")
    }

    @Test func aWebPushAnswerBecomesTheOutcomeEveryProviderRecords() {
        // A push service's 201 is a delivery, recorded as 200 like APNs' and FCM's.
        #expect(WebPushPool.outcome(of: .answered(status: 201, reason: nil, retryAfter: nil)).status == 200)
        #expect(classifyWebPush(WebPushPool.outcome(of: .answered(status: 201, reason: nil, retryAfter: nil))) == .delivered)
        #expect(classifyWebPush(WebPushPool.outcome(of: .answered(status: 410, reason: nil, retryAfter: nil)))
                == .tokenDead(reason: "Gone", timestampMilliseconds: nil))
        #expect(classifyWebPush(WebPushPool.outcome(of: .answered(status: 404, reason: nil, retryAfter: nil)))
                == .tokenDead(reason: "NotFound", timestampMilliseconds: nil))
        #expect(classifyWebPush(WebPushPool.outcome(of: .answered(status: 413, reason: "PayloadTooLarge", retryAfter: nil)))
                == .jobError(reason: "PayloadTooLarge"))
        #expect(classifyWebPush(WebPushPool.outcome(of: .answered(status: 400, reason: "BadRequest", retryAfter: nil)))
                == .permanentFailure(reason: "BadRequest"))
        #expect(classifyWebPush(WebPushPool.outcome(of: .answered(status: 429, reason: nil, retryAfter: .seconds(7))))
                == .retryLater(reason: "TooManyRequests", reconnect: false))
        #expect(WebPushPool.outcome(of: .answered(status: 429, reason: nil, retryAfter: .seconds(7)))
                == .response(ProviderResponse(status: 429, retryAfter: "7")))
        #expect(classifyWebPush(WebPushPool.outcome(of: .answered(status: 503, reason: nil, retryAfter: nil)))
                == .retryLater(reason: "HTTP503", reconnect: false))
        #expect(classifyWebPush(WebPushPool.outcome(of: .endpointNotAllowed)) == .permanentFailure(reason: "EndpointNotAllowed"))
        guard case .retryLater = classifyWebPush(WebPushPool.outcome(of: .noAnswer("connection refused"))) else {
            Issue.record("no answer is retried")
            return
        }
        // 401 and 403 pause the app's Web Push with the answer quoted; Apple's BadJwtToken names the subject rule.
        guard case .configurationError(let reason) = classifyWebPush(WebPushPool.outcome(of: .answered(status: 403, reason: "BadJwtToken", retryAfter: nil))) else {
            Issue.record("403 is the app's configuration")
            return
        }
        #expect(reason.contains("403 BadJwtToken") && reason.contains("vapid_subject"), "\(reason)")
    }

    @Test(.timeLimit(.minutes(1))) func anEndpointOutsideTheAllowedOriginsIsRefusedWithoutSending() async throws {
        let client = try WebPushClient(
            configuration: WebPushClientConfiguration(requestTimeout: .seconds(1)), tokens: try VAPIDTokenCache(),
            logger: Logger(label: "test"))
        let signer = VAPIDSigner(key: .generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        for endpoint in ["https://10.0.0.5/admin", "https://localhost:8080/push/1", "https://169.254.169.254/latest",
                         "https://fcm.googleapis.com.evil.example/fcm/send/x"] {
            #expect(await client.send(try Self.message(to: endpoint), signer: signer) == .endpointNotAllowed, "\(endpoint)")
        }
        await client.shutdown()
    }

    @Test(.network, .timeLimit(.minutes(1))) func anOperatorAllowedOriginIsSentToAndAnUnreachableOneHasNoAnswer() async throws {
        // Port 9 on the loopback: nothing listens there, so the allowed origin is tried and refused.
        let client = try WebPushClient(
            configuration: WebPushClientConfiguration(allowedOrigins: try WebPushOrigins(allowing: ["https://127.0.0.1:9"]),
                                                      requestTimeout: .seconds(2)),
            tokens: try VAPIDTokenCache(), logger: Logger(label: "test"))
        let signer = VAPIDSigner(key: .generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        let answer = await client.send(try Self.message(to: "https://127.0.0.1:9/push/abc"), signer: signer)
        guard case .noAnswer(let reason) = answer else {
            Issue.record("expected no answer, got \(answer)")
            return
        }
        #expect(!reason.contains("/push/abc"), "the endpoint's path stays out of what is logged and recorded")
        await client.shutdown()
    }

    @Test func aPlaintextTooLargeToEncryptIsUnsendable() async throws {
        let client = try WebPushClient(
            configuration: WebPushClientConfiguration(allowedOrigins: try WebPushOrigins(allowing: ["https://127.0.0.1:9"])),
            tokens: try VAPIDTokenCache(), logger: Logger(label: "test"))
        var message = try Self.message(to: "https://127.0.0.1:9/push/abc")
        message.plaintext = Array(repeating: 0x61, count: WebPushEncryption.maximumPlaintextLength + 1)
        let signer = VAPIDSigner(key: .generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        guard case .unsendable = await client.send(message, signer: signer) else {
            Issue.record("a plaintext over 3,993 bytes must not be sent")
            return
        }
        await client.shutdown()
    }

    @Test func theHeadersCarryTTLUrgencyTopicTheEncodingAndVAPID() throws {
        var message = try Self.message(to: "https://fcm.googleapis.com/fcm/send/abc")
        message.urgency = .high
        message.topic = WebPushTopic(collapseID: "score-update")
        let signer = VAPIDSigner(key: .generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        let token = try signer.sign(audience: message.subscription.origin, now: Date())
        let headers = Dictionary(uniqueKeysWithValues: message.headers(authorization: token))
        #expect(headers["TTL"] == "60")
        #expect(headers["Content-Encoding"] == "aes128gcm")
        #expect(headers["Urgency"] == "high")
        #expect(headers["Topic"] == "score-update")
        #expect(headers["Authorization"]?.hasPrefix("vapid t=") == true)
        #expect(headers["Authorization"]?.contains("k=\(signer.key.applicationServerKey)") == true)
    }

    @Test func theTTLComesFromTheJobsExpiry() {
        let now = Date(timeIntervalSince1970: 1_000_000)
        #expect(WebPushMessage.timeToLive(expiresAt: nil, now: now) == WebPushMessage.maximumTimeToLive)
        #expect(WebPushMessage.timeToLive(expiresAt: now.addingTimeInterval(90.7), now: now) == 90)
        #expect(WebPushMessage.timeToLive(expiresAt: now.addingTimeInterval(-5), now: now) == 0)
        #expect(WebPushMessage.timeToLive(expiresAt: now.addingTimeInterval(90 * 24 * 3600), now: now) == WebPushMessage.maximumTimeToLive)
    }

    @Test func anAnswersReasonIsReadFromItsBodyAndHostileBodiesGiveNone() {
        #expect(WebPushClient.reason(in: Array(#"{"reason":"BadJwtToken"}"#.utf8)) == "BadJwtToken")
        #expect(WebPushClient.reason(in: Array(#"{"error":{"code":403,"message":"invalid JWT provided"}}"#.utf8)) == "invalid JWT provided")
        #expect(WebPushClient.reason(in: Array("Subscription has expired\nmore".utf8)) == "Subscription has expired")
        #expect(WebPushClient.reason(in: []) == nil)
        #expect(WebPushClient.reason(in: [0xFF, 0xFE, 0x00]) == nil)
        #expect(WebPushClient.reason(in: Array("bell\u{07}".utf8)) == nil)
        #expect(WebPushClient.reason(in: Array(String(repeating: "x", count: 500).utf8))?.count == 201)
    }

    @Test func retryAfterIsReadAsSecondsOrADateAndBounded() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(WebPushClient.retryAfter("30", now: now) == .seconds(30))
        #expect(WebPushClient.retryAfter("86400", now: now) == .seconds(3600))
        #expect(WebPushClient.retryAfter(nil, now: now) == nil)
        #expect(WebPushClient.retryAfter("soon", now: now) == nil)
        #expect(WebPushClient.retryAfter("-4", now: now) == nil)
        // 1,700,000,000 is Tue, 14 Nov 2023 22:13:20 GMT.
        #expect(WebPushClient.retryAfter("Tue, 14 Nov 2023 22:14:20 GMT", now: now) == .seconds(60))
        #expect(WebPushClient.retryAfter("Tue, 14 Nov 2023 22:00:00 GMT", now: now) == .seconds(0))
    }
}
