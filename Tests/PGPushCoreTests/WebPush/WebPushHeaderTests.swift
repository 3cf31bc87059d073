import Crypto
import Foundation
import Testing
import PGPushCore

@Suite struct WebPushTopicTests {
    @Test(arguments: ["a", "order-123_B", String(repeating: "Z", count: 32)])
    func validCollapseIDsAreSentUnchanged(collapseID: String) {
        #expect(WebPushTopic(collapseID: collapseID)?.value == collapseID)
    }

    @Test(arguments: ["order:123", "chat/42", "with space", "padded==", String(repeating: "Z", count: 33), "é"])
    func otherCollapseIDsAreHashed(collapseID: String) throws {
        let topic = try #require(WebPushTopic(collapseID: collapseID))
        #expect(topic.value.count == 32)
        #expect(WebPushTopic.isValid(topic.value))
        let expected = WebPushBase64URL.encode(SHA256.hash(data: Data(collapseID.utf8)).prefix(24))
        #expect(topic.value == expected)
        #expect(WebPushTopic(collapseID: collapseID) == topic)
    }

    @Test func knownHash() {
        // SHA-256("order:123") starts 8c0b0e…; its first 24 bytes, base64url.
        let digest = Array(SHA256.hash(data: Data("order:123".utf8)))
        #expect(WebPushTopic(collapseID: "order:123")?.value == WebPushBase64URL.encode(digest[0..<24]))
        #expect(WebPushTopic(collapseID: "order:123") != WebPushTopic(collapseID: "order:124"))
    }

    @Test func noCollapseIDNoTopic() {
        #expect(WebPushTopic(collapseID: nil) == nil)
        #expect(WebPushTopic(collapseID: "") == nil)
        #expect(!WebPushTopic.isValid(""))
        #expect(!WebPushTopic.isValid("a=b"))
        #expect(!WebPushTopic.isValid("a+b"))
    }
}

@Suite struct WebPushUrgencyTests {
    @Test func rawValuesAreTheHeaderValues() {
        #expect(WebPushUrgency.allCases.map(\.rawValue) == ["very-low", "low", "normal", "high"])
        #expect(WebPushUrgency(rawValue: "very-low") == .veryLow)
        #expect(WebPushUrgency(rawValue: "urgent") == nil)
        #expect(WebPushUrgency.headerName == "Urgency")
    }
}

@Suite struct WebPushOriginsTests {
    let publicOnly = WebPushOrigins.publicPushServices

    @Test(arguments: [
        "https://fcm.googleapis.com/fcm/send/abc:APA91b",
        "https://updates.push.services.mozilla.com/wpush/v2/gAAAA",
        "https://web.push.apple.com/QGuQyavXutnMHAmodGp9I",
        "https://wns2-by3p.notify.windows.com/w/?token=BQYAAAB",
        "https://db5p.notify.windows.com/w/?token=x",
        "https://FCM.GoogleAPIs.com:443/fcm/send/x",
    ])
    func allowsThePublicPushServices(endpoint: String) {
        #expect(publicOnly.allows(endpoint: endpoint))
    }

    @Test(arguments: [
        "https://10.0.0.5/admin",
        "https://localhost:8080/",
        "https://127.0.0.1:8443/push",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/x",
        "https://fcm.googleapis.com:8443/fcm/send/x",
        "https://fcm.googleapis.com.attacker.example/x",
        "https://notify.windows.com/x",
        "https://evilnotify.windows.com/x",
        "https://notify.windows.com.attacker.example/x",
        "http://fcm.googleapis.com/fcm/send/x",
        "https://user@fcm.googleapis.com/x",
        "not a url",
    ])
    func refusesEverythingElse(endpoint: String) {
        #expect(!publicOnly.allows(endpoint: endpoint))
    }

    @Test func operatorOriginsAreNormalisedAndExact() throws {
        let origins = try WebPushOrigins(allowing: ["HTTPS://127.0.0.1:8443/", "https://Push.Example.COM:443", "https://*.push.example.net"])
        #expect(origins.allows(endpoint: "https://127.0.0.1:8443/push/1"))
        #expect(!origins.allows(endpoint: "https://127.0.0.1:8444/push/1"))
        #expect(!origins.allows(endpoint: "https://127.0.0.1/push/1"))
        #expect(origins.allows(endpoint: "https://push.example.com/x"))
        #expect(origins.allows(endpoint: "https://eu.push.example.net/x"))
        #expect(!origins.allows(endpoint: "https://push.example.net/x"))
        #expect(origins.allows(endpoint: "https://fcm.googleapis.com/fcm/send/x"))
        #expect(origins.description.contains("https://127.0.0.1:8443"))
        #expect(origins.description.contains("https://push.example.com,") || origins.description.hasSuffix("https://push.example.com"))

        let subscription = try WebPushTestUserAgent().subscription(endpoint: "https://127.0.0.1:8443/push/1")
        #expect(origins.allows(subscription))
        #expect(!publicOnly.allows(subscription))
    }

    @Test func withoutTheKnownPushServices() throws {
        let origins = try WebPushOrigins(allowing: ["https://127.0.0.1:8443"], includingKnownPushServices: false)
        #expect(origins.allows(endpoint: "https://127.0.0.1:8443/x"))
        #expect(!origins.allows(endpoint: "https://fcm.googleapis.com/fcm/send/x"))
    }

    @Test(arguments: [
        "http://127.0.0.1:8443", "https://example.com/path", "https://user@example.com", "https://*.com",
        "example.com", "https://", "https://example.com:0", "https://example.com?x", "https://*.[::1]",
    ])
    func refusesMalformedOperatorOrigins(text: String) {
        do {
            _ = try WebPushOrigins(allowing: [text])
            Issue.record("\(text) was accepted")
        } catch {
            #expect(error.code == .invalidOrigin)
            #expect(error.message.contains(text))
        }
    }

    @Test func originParsing() throws {
        #expect(try WebPushOrigin(parsing: "https://[::1]:8443").serialized == "https://[::1]:8443")
        #expect(try WebPushOrigin(parsing: "https://Example.com:443/") == WebPushOrigin(host: "example.com"))
        #expect(throws: WebPushError.self) { try WebPushOrigin(host: "exa mple.com") }
        #expect(throws: WebPushError.self) { try WebPushOrigin(host: "example.com", port: 70_000) }
    }
}
