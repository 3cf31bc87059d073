import Foundation
import Testing
@testable import PGPushCore

private func text(_ bytes: [UInt8]) -> String {
    String(decoding: bytes, as: UTF8.self)
}

/// The `message` object of a body, parsed back with Foundation.
private func parsedMessage(_ body: [UInt8]) throws -> [String: Any] {
    let object = try #require(JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
    return try #require(object["message"] as? [String: Any])
}

@Suite struct FCMRequestBodyBuilderTests {
    @Test func splicesTheTokenInFront() throws {
        let stored = #"{"notification":{"title":"Hi","body":"there"},"data":{"k":"v"},"android":{"priority":"HIGH","ttl":"3600s"}}"#
        let builder = try FCMRequestBodyBuilder(message: Data(stored.utf8))
        let body = builder.body(forToken: "fcm:Token-123_abc")
        #expect(text(body) == #"{"message":{"token":"fcm:Token-123_abc","notification":{"title":"Hi","body":"there"},"data":{"k":"v"},"android":{"priority":"HIGH","ttl":"3600s"}}}"#)

        let message = try parsedMessage(body)
        #expect(message["token"] as? String == "fcm:Token-123_abc")
        #expect((message["data"] as? [String: String]) == ["k": "v"])
        #expect(Set(message.keys) == ["token", "notification", "data", "android"])
    }

    @Test func oneBuilderManyTokens() throws {
        let builder = try FCMRequestBodyBuilder(message: Data(#"{"data":{"n":"1"}}"#.utf8))
        #expect(text(builder.body(forToken: "a")) == #"{"message":{"token":"a","data":{"n":"1"}}}"#)
        #expect(text(builder.body(forToken: "bb")) == #"{"message":{"token":"bb","data":{"n":"1"}}}"#)
    }

    @Test(arguments: ["{}", "  {  }\n", "\t{\r\n}"])
    func emptyMessage(stored: String) throws {
        let body = try FCMRequestBodyBuilder(message: Data(stored.utf8)).body(forToken: "t")
        #expect(text(body) == #"{"message":{"token":"t"}}"#)
        #expect(try parsedMessage(body).count == 1)
    }

    @Test func surroundingWhitespaceIsDropped() throws {
        let body = try FCMRequestBodyBuilder(message: Data(" \n{ \"data\" : {\"a\":\"b\"} }\n ".utf8)).body(forToken: "t")
        #expect(text(body) == #"{"message":{"token":"t","data" : {"a":"b"} }}"#)
        #expect(try parsedMessage(body)["data"] as? [String: String] == ["a": "b"])
    }

    @Test(arguments: [
        #"x","topic":"everyone"#, "quote\"back\\slash", "line\nbreak\ttab\r", "nul\u{0}bell\u{7}esc\u{1B}", "ünïcødé ✓ 🚀", "",
    ])
    func tokensAreEscaped(token: String) throws {
        let body = try FCMRequestBodyBuilder(message: Data(#"{"data":{"k":"v"}}"#.utf8)).body(forToken: token)
        let message = try parsedMessage(body)
        #expect(message["token"] as? String == token)
        #expect(message["topic"] == nil)
        #expect(Set(message.keys) == ["token", "data"])
        // Raw control characters are not allowed inside a JSON string.
        #expect(!body.contains { $0 < 0x20 })
    }

    @Test func validateOnly() throws {
        let body = try FCMRequestBodyBuilder(message: Data(#"{"data":{"k":"v"}}"#.utf8), validateOnly: true).body(forToken: "t")
        #expect(text(body) == #"{"validate_only":true,"message":{"token":"t","data":{"k":"v"}}}"#)
        let object = try #require(JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        #expect(object["validate_only"] as? Bool == true)
    }

    @Test(arguments: [
        ("", "JSON object"), ("not json", "JSON object"), ("[1,2]", "JSON object"), (#""text""#, "JSON object"),
        (#"{"data":"#, "JSON object"), ("null", "JSON object"),
        (#"{"token":"abc","data":{}}"#, "\"token\""), (#"{"topic":"news"}"#, "\"topic\""),
        (#"{"condition":"'a' in topics"}"#, "\"condition\""),
    ])
    func refusesWhatCannotBeSpliced(stored: String, naming: String) {
        do {
            _ = try FCMRequestBodyBuilder(message: Data(stored.utf8))
            Issue.record("accepted \(stored)")
        } catch {
            #expect(error.code == .invalidInput)
            #expect(error.message.contains(naming), "\(error.message)")
        }
    }
}
