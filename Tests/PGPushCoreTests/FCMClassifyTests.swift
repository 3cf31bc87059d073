import Foundation
import Testing
@testable import PGPushCore

private let now = Date(timeIntervalSince1970: 1_700_000_000)  // Tue, 14 Nov 2023 22:13:20 GMT

/// Google's error body, as FCM sends it.
private func errorBody(
    code: Int, status: String?, errorCode: String? = nil, message: String = "Some message.", fields: [String] = []
) -> Data {
    var details: [[String: Any]] = []
    if let errorCode {
        details.append(["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": errorCode])
    }
    if !fields.isEmpty {
        details.append([
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": fields.map { ["field": $0, "description": "Invalid value"] },
        ])
    }
    var error: [String: Any] = ["code": code, "message": message, "details": details]
    if let status { error["status"] = status }
    return try! JSONSerialization.data(withJSONObject: ["error": error])
}

private func classified(_ status: Int, _ body: Data, retryAfter: String? = nil) -> DeliveryClass {
    classify(FCMResponse(status: status, body: body, retryAfter: retryAfter, now: now))
}

/// FCM.md's error table, one row each, plus the fallbacks of `classify(_:)`; expectations
/// are written out here rather than taken from the code.
private let rows: [(name: String, status: Int, body: Data, expected: DeliveryClass)] = [
    ("accepted", 200, Data(#"{"name":"projects/pgpush-test/messages/0:1700000000%abc"}"#.utf8), .delivered),
    ("accepted, garbage body", 200, Data("\u{0}\u{1}garbage".utf8), .delivered),
    ("unregistered", 404, errorBody(code: 404, status: "NOT_FOUND", errorCode: "UNREGISTERED", message: "Requested entity was not found."),
     .tokenDead(reason: "UNREGISTERED", timestampMilliseconds: nil)),
    ("bad token by field", 400, errorBody(code: 400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
                                          message: "Invalid value", fields: ["message.token"]),
     .tokenWrongForTopicOrEnvironment(reason: "INVALID_ARGUMENT")),
    ("bad token by message", 400, errorBody(code: 400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
                                            message: "The registration token is not a valid FCM registration token"),
     .tokenWrongForTopicOrEnvironment(reason: "INVALID_ARGUMENT")),
    ("bad token, status only", 400, errorBody(code: 400, status: "INVALID_ARGUMENT", fields: ["message.token"]),
     .tokenWrongForTopicOrEnvironment(reason: "INVALID_ARGUMENT")),
    ("bad ttl", 400, errorBody(code: 400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", fields: ["message.android.ttl"]),
     .jobError(reason: "INVALID_ARGUMENT message.android.ttl")),
    ("bad data value", 400, errorBody(code: 400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", fields: ["message.data[0].value"]),
     .jobError(reason: "INVALID_ARGUMENT message.data[0].value")),
    ("invalid, no field", 400, errorBody(code: 400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", message: "Message is too big"),
     .jobError(reason: "INVALID_ARGUMENT")),
    ("invalid, unprintable field", 400, errorBody(code: 400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
                                                  fields: ["message.data[\"secret value\"]", String(repeating: "f", count: 65)]),
     .jobError(reason: "INVALID_ARGUMENT")),
    ("sender id mismatch", 403, errorBody(code: 403, status: "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH"),
     .tokenWrongForTopicOrEnvironment(reason: "SENDER_ID_MISMATCH")),
    ("quota", 429, errorBody(code: 429, status: "RESOURCE_EXHAUSTED", errorCode: "QUOTA_EXCEEDED"),
     .retryLater(reason: "QUOTA_EXCEEDED", reconnect: false)),
    ("unavailable", 503, errorBody(code: 503, status: "UNAVAILABLE", errorCode: "UNAVAILABLE"),
     .retryLater(reason: "UNAVAILABLE", reconnect: false)),
    ("internal", 500, errorBody(code: 500, status: "INTERNAL", errorCode: "INTERNAL"),
     .retryLater(reason: "INTERNAL", reconnect: false)),
    ("third-party auth", 401, errorBody(code: 401, status: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR"),
     .configurationError(reason: "THIRD_PARTY_AUTH_ERROR")),
    ("apns auth, older name", 401, errorBody(code: 401, status: "UNAUTHENTICATED", errorCode: "APNS_AUTH_ERROR"),
     .configurationError(reason: "APNS_AUTH_ERROR")),
    ("access token expired", 401, errorBody(code: 401, status: "UNAUTHENTICATED", message: "Request had invalid authentication credentials."),
     .refreshProviderTokenAndRetry(reason: "UNAUTHENTICATED")),
    ("permission denied", 403, errorBody(code: 403, status: "PERMISSION_DENIED", message: "Permission 'cloudmessaging.messages.create' denied"),
     .configurationError(reason: "PERMISSION_DENIED")),

    // Codes FCM.md does not list.
    ("not found without UNREGISTERED", 404, errorBody(code: 404, status: "NOT_FOUND"), .configurationError(reason: "NOT_FOUND")),
    ("resource exhausted without code", 429, errorBody(code: 429, status: "RESOURCE_EXHAUSTED"),
     .retryLater(reason: "RESOURCE_EXHAUSTED", reconnect: false)),
    ("deadline exceeded", 504, errorBody(code: 504, status: "DEADLINE_EXCEEDED"), .retryLater(reason: "DEADLINE_EXCEEDED", reconnect: false)),
    ("new code, known status", 503, errorBody(code: 503, status: "UNAVAILABLE", errorCode: "SOMETHING_NEW"),
     .retryLater(reason: "SOMETHING_NEW", reconnect: false)),
    ("new code, unknown status", 400, errorBody(code: 400, status: "FAILED_PRECONDITION", errorCode: "SOMETHING_NEW"),
     .jobError(reason: "SOMETHING_NEW")),
    ("unspecified error on 404", 404, errorBody(code: 404, status: "NOT_FOUND", errorCode: "UNSPECIFIED_ERROR"),
     .configurationError(reason: "UNSPECIFIED_ERROR")),
    ("unknown status, 409", 409, errorBody(code: 409, status: "ABORTED"), .permanentFailure(reason: "ABORTED")),

    // No usable body: the HTTP status decides, and the reason is HTTP<status>.
    ("400, no body", 400, Data(), .jobError(reason: "HTTP400")),
    ("401, no body", 401, Data(), .refreshProviderTokenAndRetry(reason: "HTTP401")),
    ("403, no body", 403, Data(), .configurationError(reason: "HTTP403")),
    ("404, HTML body", 404, Data("<html><body>Not Found</body></html>".utf8), .configurationError(reason: "HTTP404")),
    ("405, no body", 405, Data(), .configurationError(reason: "HTTP405")),
    ("413, no body", 413, Data(), .jobError(reason: "HTTP413")),
    ("429, no body", 429, Data(), .retryLater(reason: "HTTP429", reconnect: false)),
    ("408, no body", 408, Data(), .permanentFailure(reason: "HTTP408")),
    ("500, garbage", 500, Data("{\"error\":".utf8), .retryLater(reason: "HTTP500", reconnect: false)),
    ("502, proxy page", 502, Data("Bad Gateway".utf8), .retryLater(reason: "HTTP502", reconnect: false)),
    ("503, no body", 503, Data(), .retryLater(reason: "HTTP503", reconnect: false)),
    ("302, redirect", 302, Data(), .configurationError(reason: "HTTP302")),
    ("204", 204, Data(), .configurationError(reason: "HTTP204")),
]

@Suite struct FCMClassifyTests {
    @Test func everyRow() {
        for row in rows {
            #expect(classified(row.status, row.body) == row.expected, "\(row.name)")
        }
    }

    @Test func parsesTheErrorObject() throws {
        let body = errorBody(code: 400, status: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
                             message: "The registration token is not a valid FCM registration token", fields: ["message.token"])
        let response = FCMResponse(status: 400, body: body, retryAfter: nil, now: now)
        #expect(response.errorCode == "INVALID_ARGUMENT")
        #expect(response.errorStatus == "INVALID_ARGUMENT")
        #expect(response.errorMessage == "The registration token is not a valid FCM registration token")
        #expect(response.fieldViolations == [FCMFieldViolation(field: "message.token", description: "Invalid value")])
        #expect(response.retryAfter == nil)
        let success = FCMResponse(status: 200, body: Data(#"{"name":"projects/p/messages/42"}"#.utf8), retryAfter: nil, now: now)
        #expect(success.messageName == "projects/p/messages/42")
        #expect(success.errorCode == nil)
    }

    /// Bodies that are not Google's error object, or are hostile: nothing is read from them, nothing crashes,
    /// and above all a 404 never turns into a dead token.
    @Test(arguments: [
        Data(), Data("null".utf8), Data("[1,2]".utf8), Data("\"UNREGISTERED\"".utf8), Data(#"{"error":"UNREGISTERED"}"#.utf8),
        Data(#"{"error":{"details":"UNREGISTERED"}}"#.utf8), Data(#"{"error":{"details":[1,"a",null,{"@type":5}]}}"#.utf8),
        Data(#"{"error":{"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":7}]}}"#.utf8),
        Data(#"{"error":{"details":[{"errorCode":"UNREGISTERED"}]}}"#.utf8),
        Data(#"{"error":{"status":"unregistered","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED x"}]}}"#.utf8),
        Data([0xFF, 0xFE, 0x00, 0x7B]), Data(repeating: 0x7B, count: 100_000),
    ])
    func garbageBodies(body: Data) {
        let response = FCMResponse(status: 404, body: body, retryAfter: nil, now: now)
        #expect(response.errorCode == nil)
        #expect(response.errorStatus == nil)
        #expect(classify(response) == .configurationError(reason: "HTTP404"))
        #expect(classified(503, body) == .retryLater(reason: "HTTP503", reconnect: false))
    }

    @Test func oversizedBodyIsNotRead() {
        let padding = String(repeating: " ", count: FCMResponse.maximumBodySize)
        let body = errorBody(code: 404, status: "NOT_FOUND", errorCode: "UNREGISTERED") + Data(padding.utf8)
        #expect(classified(404, body) == .configurationError(reason: "HTTP404"))
        let small = errorBody(code: 404, status: "NOT_FOUND", errorCode: "UNREGISTERED") + Data("   ".utf8)
        #expect(classified(404, small) == .tokenDead(reason: "UNREGISTERED", timestampMilliseconds: nil))
    }

    @Test func firstFcmErrorWins() {
        let fcmError = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
        let body = try! JSONSerialization.data(withJSONObject: ["error": [
            "code": 404, "status": "NOT_FOUND",
            "details": [["@type": fcmError, "errorCode": "UNREGISTERED"], ["@type": fcmError, "errorCode": "INTERNAL"]],
        ] as [String: Any]])
        #expect(classified(404, body) == .tokenDead(reason: "UNREGISTERED", timestampMilliseconds: nil))
    }

    @Test func retryAfterTravelsWithTheResponse() {
        let body = errorBody(code: 429, status: "RESOURCE_EXHAUSTED", errorCode: "QUOTA_EXCEEDED")
        #expect(FCMResponse(status: 429, body: body, retryAfter: "60", now: now).retryAfter == .seconds(60))
        #expect(FCMResponse(status: 503, body: Data(), retryAfter: "soon", now: now).retryAfter == nil)
        #expect(FCMResponse(status: 503, body: Data(), retryAfter: nil, now: now).retryAfter == nil)
    }
}

@Suite struct FCMRetryAfterTests {
    @Test(arguments: [
        ("120", .seconds(120)), (" 7 ", .seconds(7)), ("0", .zero), ("007", .seconds(7)),
        ("99999999999999999999999", .seconds(Int64.max)),
        ("Tue, 14 Nov 2023 22:13:50 GMT", .seconds(30)),
        ("Wed, 15 Nov 2023 00:00:00 GMT", .seconds(6400)),
        ("Tue, 14 Nov 2023 22:13:20 GMT", .zero),
        ("Mon, 13 Nov 2023 22:13:20 GMT", .zero),
    ] as [(String, Duration?)])
    func parses(value: String, expected: Duration?) {
        #expect(FCMRetryAfter.parse(value, now: now) == expected)
    }

    @Test(arguments: [
        "", " ", "-5", "+5", "1.5", "1e3", "abc", "60s",
        "Tue, 31 Feb 2023 22:13:50 GMT", "Tue, 14 Nov 2023 22:13:50 UTC", "Tue, 14 Nov 2023 25:13:50 GMT",
        "Tuesday, 14-Nov-23 22:13:50 GMT", "Tue Nov 14 22:13:50 2023", "Tue, 14 Foo 2023 22:13:50 GMT", "Tue, +4 Nov 2023 22:13:50 GMT",
    ])
    func refuses(value: String) {
        #expect(FCMRetryAfter.parse(value, now: now) == nil)
    }
}
