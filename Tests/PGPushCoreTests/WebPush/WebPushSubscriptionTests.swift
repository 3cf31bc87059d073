import Crypto
import Foundation
import Testing
import PGPushCore

/// A user agent's side of a subscription: its key pair and auth secret.
struct WebPushTestUserAgent {
    let privateKey = P256.KeyAgreement.PrivateKey()
    let auth: [UInt8] = SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) }

    var p256dh: String { WebPushBase64URL.encode(privateKey.publicKey.x963Representation) }
    var authText: String { WebPushBase64URL.encode(auth) }

    func json(endpoint: String = "https://fcm.googleapis.com/fcm/send/dXNlcjE:APA91bH", p256dh: String? = nil,
              auth: String? = nil) -> Data {
        Data(#"{"endpoint":"\#(endpoint)","expirationTime":null,"keys":{"p256dh":"\#(p256dh ?? self.p256dh)","auth":"\#(auth ?? authText)"}}"#.utf8)
    }

    func subscription(endpoint: String = "https://fcm.googleapis.com/fcm/send/dXNlcjE:APA91bH") throws -> WebPushSubscription {
        try WebPushSubscription(endpoint: endpoint, p256dh: p256dh, auth: authText)
    }
}

private func webPushError(_ body: () throws -> Void) -> WebPushError? {
    do {
        try body()
        return nil
    } catch {
        return error as? WebPushError
    }
}

@Suite struct WebPushBase64URLTests {
    @Test func roundTripsEveryLengthWithAndWithoutPadding() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 250) }
            let text = WebPushBase64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(WebPushBase64URL.decode(text) == bytes)
            let padded = text + String(repeating: "=", count: (4 - text.count % 4) % 4)
            #expect(WebPushBase64URL.decode(padded) == bytes)
            // Same as Foundation's standard base64, with the URL alphabet.
            let standard = Data(bytes).base64EncodedString()
            #expect(padded == standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"))
        }
    }

    @Test func refusesWhatIsNotBase64URL() {
        #expect(WebPushBase64URL.decode("ab+c") == nil)
        #expect(WebPushBase64URL.decode("ab/c") == nil)
        #expect(WebPushBase64URL.decode("abcde") == nil)       // 5 characters: no encoding has that length
        #expect(WebPushBase64URL.decode("abc==") == nil)       // padding that does not make a multiple of 4
        #expect(WebPushBase64URL.decode("ab=") == nil)
        #expect(WebPushBase64URL.decode("a===") == nil)
        #expect(WebPushBase64URL.decode("ab c") == nil)
        #expect(WebPushBase64URL.decode("abc=") == [0x69, 0xB7])
        #expect(WebPushBase64URL.decode("ab==") == [0x69])
    }
}

@Suite struct WebPushSubscriptionTests {
    let agent = WebPushTestUserAgent()

    @Test func parsesToJSONOutput() throws {
        let subscription = try WebPushSubscription(json: agent.json())
        #expect(subscription.endpoint == "https://fcm.googleapis.com/fcm/send/dXNlcjE:APA91bH")
        #expect(subscription.origin.serialized == "https://fcm.googleapis.com")
        #expect(subscription.keys.p256dh == Array(agent.privateKey.publicKey.x963Representation))
        #expect(subscription.keys.auth == agent.auth)
        #expect(subscription.keys.p256dhBase64URL == agent.p256dh)
        #expect(subscription.keys.authBase64URL == agent.authText)
        #expect(subscription.expirationTime == nil)
        #expect(subscription == (try agent.subscription()))
    }

    @Test func acceptsPaddedKeysAnExpirationTimeAndUnknownFields() throws {
        let json = #"{"endpoint":"https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk","expirationTime":1700000000000,"#
            + #""keys":{"p256dh":"\#(agent.p256dh)=","auth":"\#(agent.authText)==","extra":1},"other":"x"}"#
        let subscription = try WebPushSubscription(json: Data(json.utf8))
        #expect(subscription.expirationTime == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(subscription.keys.auth == agent.auth)
        #expect(subscription.origin.serialized == "https://updates.push.services.mozilla.com")
    }

    @Test func originIsNormalised() throws {
        #expect(try agent.subscription(endpoint: "HTTPS://Web.Push.Apple.COM/QGuQ").origin.serialized == "https://web.push.apple.com")
        #expect(try agent.subscription(endpoint: "https://web.push.apple.com:443/QGuQ").origin.serialized == "https://web.push.apple.com")
        let custom = try agent.subscription(endpoint: "https://127.0.0.1:8443/push/1")
        #expect(custom.origin.serialized == "https://127.0.0.1:8443")
        #expect(custom.origin.host == "127.0.0.1" && custom.origin.port == 8443)
        #expect(try agent.subscription(endpoint: "https://[::1]:8443/x").origin.serialized == "https://[::1]:8443")
        #expect(try agent.subscription(endpoint: "https://example.com").origin.serialized == "https://example.com")
    }

    @Test(arguments: [
        ("", "is empty"),
        ("http://fcm.googleapis.com/fcm/send/x", "is not an https URL"),
        ("wss://fcm.googleapis.com/x", "is not an https URL"),
        ("/fcm/send/x", "is not an absolute URL"),
        ("https:///fcm/send/x", "has no host"),
        ("https://user:secret@fcm.googleapis.com/x", "must not contain user info"),
        ("https://@fcm.googleapis.com/x", "must not contain user info"),
        ("https://fcm.googleapis.com/a b", "whitespace"),
        ("https://fcm.googleapis.com:99999/x", "invalid host or port"),
        ("https://fcm%2Egoogleapis.com/x", "invalid host or port"),
        ("https://fcm.googleapis.com/" + String(repeating: "a", count: 2_030), "longer than 2048"),
    ])
    func refusesBadEndpoints(endpoint: String, reason: String) {
        let error = webPushError { _ = try agent.subscription(endpoint: endpoint) }
        #expect(error?.code == .invalidEndpoint)
        #expect(error?.field == "endpoint")
        #expect(error?.message.hasPrefix("endpoint ") == true)
        #expect(error?.message.contains(reason) == true, "\(String(describing: error))")
        // The message never quotes the endpoint.
        if endpoint.count > 12 { #expect(error?.message.contains(endpoint) == false) }
    }

    @Test func acceptsTheLongestEndpoint() throws {
        let endpoint = "https://fcm.googleapis.com/" + String(repeating: "a", count: 2_048 - 27)
        #expect(endpoint.count == 2_048)
        _ = try agent.subscription(endpoint: endpoint)
    }

    @Test func refusesBadP256dh() throws {
        var offCurve = Array(agent.privateKey.publicKey.x963Representation)
        offCurve[64] ^= 0x01
        var compressed = Array(agent.privateKey.publicKey.compressedRepresentation)
        compressed += [UInt8](repeating: 0, count: 32)
        let cases: [(String, String)] = [
            ("BCVx+r7N", "not base64url"),
            (WebPushBase64URL.encode(offCurve), "not a point on the P-256 curve"),
            (WebPushBase64URL.encode(compressed), "65-byte uncompressed"),
            (WebPushBase64URL.encode(agent.privateKey.publicKey.x963Representation.dropLast()), "got 64 bytes"),
            ("", "got 0 bytes"),
        ]
        for (p256dh, reason) in cases {
            let error = webPushError { _ = try WebPushSubscription(json: agent.json(p256dh: p256dh)) }
            #expect(error?.code == .invalidPublicKey)
            #expect(error?.field == "keys.p256dh")
            #expect(error?.message.contains("keys.p256dh") == true)
            #expect(error?.message.contains(reason) == true, "\(String(describing: error))")
        }
    }

    @Test func refusesBadAuth() {
        for (auth, reason) in [("AAAAAAAAAAAAAAAAAAAAAAAA", "got 18"), ("AAAAAAAAAAAAAAAAAAAA", "got 15"), ("AAAA/AAA", "not base64url")] {
            let error = webPushError { _ = try WebPushSubscription(json: agent.json(auth: auth)) }
            #expect(error?.code == .invalidAuthSecret)
            #expect(error?.field == "keys.auth")
            #expect(error?.message.contains("keys.auth") == true)
            #expect(error?.message.contains(reason) == true, "\(String(describing: error))")
        }
    }

    @Test func refusesJSONOfTheWrongShape() {
        let cases: [(String, WebPushError.Code, String?)] = [
            ("[]", .malformedSubscription, nil),
            ("not json", .malformedSubscription, nil),
            (#"{"keys":{"p256dh":"x","auth":"y"}}"#, .invalidEndpoint, "endpoint"),
            (#"{"endpoint":1,"keys":{}}"#, .invalidEndpoint, "endpoint"),
            (#"{"endpoint":"https://a.example/x"}"#, .malformedSubscription, "keys"),
            (#"{"endpoint":"https://a.example/x","keys":{"auth":"y"}}"#, .invalidPublicKey, "keys.p256dh"),
            (#"{"endpoint":"https://a.example/x","keys":{"p256dh":"x","auth":7}}"#, .invalidAuthSecret, "keys.auth"),
            (#"{"endpoint":"https://a.example/x","expirationTime":"soon","keys":{"p256dh":"x","auth":"y"}}"#, .malformedSubscription, "expirationTime"),
            (#"{"endpoint":"https://a.example/x","expirationTime":-5,"keys":{"p256dh":"x","auth":"y"}}"#, .malformedSubscription, "expirationTime"),
        ]
        for (json, code, field) in cases {
            let error = webPushError { _ = try WebPushSubscription(json: Data(json.utf8)) }
            #expect(error?.code == code, "\(json)")
            #expect(error?.field == field, "\(json)")
            if let field { #expect(error?.message.contains(field) == true, "\(json)") }
        }
        let huge = Data(repeating: UInt8(ascii: " "), count: 9_000)
        #expect(webPushError { _ = try WebPushSubscription(json: huge) }?.code == .malformedSubscription)
    }

    @Test func errorsNeverQuoteTheKeys() {
        let error = webPushError { _ = try WebPushSubscription(json: agent.json(endpoint: "http://a.example/x")) }
        #expect(error != nil)
        #expect(error?.description.contains(agent.authText) == false)
        #expect(error?.description.contains(agent.p256dh) == false)
    }
}
