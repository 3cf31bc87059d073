import Foundation
import PGPushCore
import PGPushSimulator
import Testing

@Suite("FCM simulator: messages:send", .timeLimit(.minutes(1)), .network)
struct FCMSimulatorSendTests {
    typealias Harness = FCMSimulatorHarness

    @Test func validSendIsAcceptedAndRecorded() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let token = Harness.token(1)
            let body = Harness.body(token: token, fields: #""notification":{"title":"Hi","body":"there"},"data":{"order":"42"},"android":{"priority":"HIGH","ttl":"3600s","collapse_key":"orders"}"#)
            let outcome = try await harness.send(client, body: body, accessToken: accessToken)
            #expect(outcome.status == 200, "\(outcome)")
            let name = try #require(outcome.json?["name"] as? String)
            #expect(name.hasPrefix("projects/\(Harness.projectID)/messages/"))
            #expect(outcome.fcmResponse.map { classify($0) } == .delivered)
            #expect(outcome.fcmResponse?.messageName == name)

            let entries = harness.simulator.ledger.entries
            #expect(entries.count == 1)
            let entry = try #require(entries.first)
            #expect(entry.token == token)
            #expect(entry.projectID == Harness.projectID)
            #expect(entry.name == name)
            let message = try #require(entry.messageObject)
            #expect(message["token"] as? String == token)
            #expect(message["data"] as? [String: String] == ["order": "42"])
            #expect((message["android"] as? [String: Any])?["ttl"] as? String == "3600s")

            // A second send to the same token is a duplicate in the ledger, with a different name.
            let again = try await harness.send(client, body: body, accessToken: accessToken)
            #expect(again.status == 200)
            #expect(again.json?["name"] as? String != name)
            #expect(harness.simulator.ledger.duplicates == [token: 2])
            #expect(harness.simulator.ledger.count(forToken: token) == 2)
            #expect(harness.simulator.statistics.sendRequests == 2)
        }
    }

    @Test func validateOnlyValidatesWithoutRecording() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let outcome = try await harness.send(client, body: Harness.body(token: Harness.token(2), validateOnly: true),
                                                 accessToken: accessToken)
            #expect(outcome.status == 200, "\(outcome)")
            #expect(outcome.json?["name"] as? String == "projects/\(Harness.projectID)/messages/fake_message_id")
            // Still validated: a bad message is refused, and a dead token is still dead.
            let invalid = try await harness.send(
                client, body: Harness.body(token: Harness.token(2), fields: #""data":{"n":1}"#, validateOnly: true),
                accessToken: accessToken)
            #expect(invalid.status == 400)
            let dead = try await harness.send(client, body: Harness.body(token: "dead-2", validateOnly: true),
                                              accessToken: accessToken)
            #expect(dead.status == 404)
            // camelCase is accepted too, as in proto JSON.
            let camel = try await harness.send(
                client, body: #"{"validateOnly":true,"message":{"token":"\#(Harness.token(3))"}}"#, accessToken: accessToken)
            #expect(camel.status == 200)
            #expect(harness.simulator.ledger.acceptedCount == 0)
            #expect(harness.simulator.statistics.validatedOnly == 2)
        }
    }

    @Test func missingBadOrExpiredAccessTokensAreUnauthenticated() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let body = Harness.body(token: Harness.token(3))
            let accessToken = try await harness.accessToken(client)

            var outcomes: [(String, SimulatorRawClient.Outcome)] = []
            outcomes.append(("none", try await harness.send(client, body: body, accessToken: nil)))
            outcomes.append(("unknown", try await harness.send(client, body: body, accessToken: "ya29.made-up")))
            outcomes.append(("basic", try await client.request(
                path: "/v1/projects/\(Harness.projectID)/messages:send",
                headers: [("authorization", "Basic \(accessToken)")], body: body)))
            harness.clock.advance(by: 3601)
            outcomes.append(("expired", try await harness.send(client, body: body, accessToken: accessToken)))
            for (name, outcome) in outcomes {
                #expect(outcome.status == 401, "\(name): \(outcome)")
                let error = outcome.json?["error"] as? [String: Any]
                #expect(error?["code"] as? Int == 401, "\(name)")
                #expect(error?["status"] as? String == "UNAUTHENTICATED", "\(name)")
                #expect(error?["details"] == nil, "\(name): no FcmError detail")
                #expect(outcome.headers["www-authenticate"]?.hasPrefix("Bearer") == true, "\(name)")
                let response = try #require(outcome.fcmResponse)
                #expect(response.errorCode == nil)
                #expect(classify(response) == .refreshProviderTokenAndRetry(reason: "UNAUTHENTICATED"))
            }
            // A fresh token works again.
            let fresh = try await harness.accessToken(client)
            #expect(try await harness.send(client, body: body, accessToken: fresh).status == 200)
            #expect(harness.simulator.ledger.acceptedCount == 1)
        }
    }

    @Test func aTokenOfAnotherProjectIsPermissionDenied() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let otherToken = try await harness.accessToken(client, account: harness.otherAccount)
            let outcome = try await harness.send(client, body: Harness.body(token: Harness.token(4)), accessToken: otherToken)
            #expect(outcome.status == 403, "\(outcome)")
            let error = outcome.json?["error"] as? [String: Any]
            #expect(error?["status"] as? String == "PERMISSION_DENIED")
            #expect(error?["details"] == nil)
            #expect(outcome.fcmResponse.map { classify($0) } == .configurationError(reason: "PERMISSION_DENIED"))
            // The same token sends fine to its own project.
            let own = try await harness.send(client, body: Harness.body(token: Harness.token(4)), accessToken: otherToken,
                                             projectID: Harness.otherProjectID)
            #expect(own.status == 200)
            #expect(harness.simulator.ledger.entries.map(\.projectID) == [Harness.otherProjectID])
            #expect(harness.simulator.statistics.tokenExchanges == [Harness.otherClientEmail: 1])
        }
    }

    struct RegistryCase: Sendable, CustomTestStringConvertible {
        var token: String
        var status: Int
        var errorStatus: String
        var errorCode: String
        var field: String?
        var message: String?
        var delivery: DeliveryClass
        var testDescription: String { token }
    }

    static let registryCases: [RegistryCase] = [
        .init(token: "dead-123", status: 404, errorStatus: "NOT_FOUND", errorCode: "UNREGISTERED",
              delivery: .tokenDead(reason: "UNREGISTERED", timestampMilliseconds: nil)),
        .init(token: "mismatch-123", status: 403, errorStatus: "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH",
              delivery: .tokenWrongForTopicOrEnvironment(reason: "SENDER_ID_MISMATCH")),
        .init(token: "invalid-123", status: 400, errorStatus: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
              field: "message.token", message: "The registration token is not a valid FCM registration token",
              delivery: .tokenWrongForTopicOrEnvironment(reason: "INVALID_ARGUMENT")),
        .init(token: "thirdparty-123", status: 401, errorStatus: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR",
              delivery: .configurationError(reason: "THIRD_PARTY_AUTH_ERROR")),
        // Malformed tokens are answered like FCM answers a bad token.
        .init(token: "has space", status: 400, errorStatus: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
              field: "message.token", message: "The registration token is not a valid FCM registration token",
              delivery: .tokenWrongForTopicOrEnvironment(reason: "INVALID_ARGUMENT")),
        .init(token: "", status: 400, errorStatus: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
              field: "message.token", message: "The registration token is not a valid FCM registration token",
              delivery: .tokenWrongForTopicOrEnvironment(reason: "INVALID_ARGUMENT")),
    ]

    @Test(arguments: registryCases)
    func registryPrefixesGetFCMErrors(_ testCase: RegistryCase) async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let outcome = try await harness.send(client, body: Harness.body(token: testCase.token), accessToken: accessToken)
            #expect(outcome.status == testCase.status, "\(outcome)")
            let error = try #require(outcome.json?["error"] as? [String: Any])
            #expect(error["code"] as? Int == testCase.status)
            #expect(error["status"] as? String == testCase.errorStatus)
            if let message = testCase.message { #expect(error["message"] as? String == message) }
            let details = try #require(error["details"] as? [[String: Any]])
            let fcmError = try #require(details.first { $0["@type"] as? String == "type.googleapis.com/google.firebase.fcm.v1.FcmError" })
            #expect(fcmError["errorCode"] as? String == testCase.errorCode)
            let response = try #require(outcome.fcmResponse)
            #expect(response.errorCode == testCase.errorCode)
            #expect(response.fieldViolations.map(\.field) == (testCase.field.map { [$0] } ?? []))
            #expect(classify(response) == testCase.delivery)
            #expect(harness.simulator.ledger.acceptedCount == 0)
            #expect(harness.simulator.statistics.count(code: testCase.errorCode) == 1)
        }
    }

    @Test func registryListsAndTheMismatchedProjectSwitch() async throws {
        try await Harness.with(configure: { $0.registry.unregistered = ["fcm-listed"] }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            #expect(try await harness.send(client, body: Harness.body(token: "fcm-listed"), accessToken: accessToken).status == 404)

            harness.simulator.updateRegistry {
                $0.mismatchedProjects = [Harness.projectID]
                $0.validTokens = ["fcm-still-good"]
            }
            for index in 0..<5 {
                let outcome = try await harness.send(client, body: Harness.body(token: Harness.token(index)), accessToken: accessToken)
                #expect(outcome.status == 403)
                #expect(outcome.fcmResponse?.errorCode == "SENDER_ID_MISMATCH")
            }
            #expect(try await harness.send(client, body: Harness.body(token: "fcm-still-good"), accessToken: accessToken).status == 200)
            // Another project is unaffected.
            let otherToken = try await harness.accessToken(client, account: harness.otherAccount)
            #expect(try await harness.send(client, body: Harness.body(token: Harness.token(9)), accessToken: otherToken,
                                           projectID: Harness.otherProjectID).status == 200)
            #expect(harness.simulator.statistics.count(code: "SENDER_ID_MISMATCH") == 5)
        }
    }

    struct InvalidCase: Sendable, CustomTestStringConvertible {
        var name: String
        var body: String
        /// `nil`: a BadRequest violation without a field (the body is not JSON).
        var field: String?
        var testDescription: String { name }
    }

    static let token = FCMSimulatorHarness.token(7)
    static let invalidCases: [InvalidCase] = [
        .init(name: "data value a number", body: Harness.body(token: token, fields: #""data":{"n":1}"#), field: "message.data"),
        .init(name: "data value an object", body: Harness.body(token: token, fields: #""data":{"o":{"a":"b"}}"#), field: "message.data"),
        .init(name: "data not a map", body: Harness.body(token: token, fields: #""data":["a"]"#), field: "message.data"),
        .init(name: "reserved key from", body: Harness.body(token: token, fields: #""data":{"from":"x"}"#), field: "message.data"),
        .init(name: "reserved key message_type", body: Harness.body(token: token, fields: #""data":{"message_type":"x"}"#), field: "message.data"),
        .init(name: "reserved google.", body: Harness.body(token: token, fields: #""data":{"google.c":"x"}"#), field: "message.data"),
        .init(name: "reserved gcm.", body: Harness.body(token: token, fields: #""data":{"gcm.n":"x"}"#), field: "message.data"),
        .init(name: "android data number", body: Harness.body(token: token, fields: #""android":{"data":{"n":2}}"#), field: "message.android.data"),
        .init(name: "priority URGENT", body: Harness.body(token: token, fields: #""android":{"priority":"URGENT"}"#), field: "message.android.priority"),
        .init(name: "priority number", body: Harness.body(token: token, fields: #""android":{"priority":10}"#), field: "message.android.priority"),
        .init(name: "ttl over 4 weeks", body: Harness.body(token: token, fields: #""android":{"ttl":"2419201s"}"#), field: "message.android.ttl"),
        .init(name: "ttl without unit", body: Harness.body(token: token, fields: #""android":{"ttl":"3600"}"#), field: "message.android.ttl"),
        .init(name: "ttl negative", body: Harness.body(token: token, fields: #""android":{"ttl":"-1s"}"#), field: "message.android.ttl"),
        .init(name: "ttl number", body: Harness.body(token: token, fields: #""android":{"ttl":3600}"#), field: "message.android.ttl"),
        .init(name: "collapse key number", body: Harness.body(token: token, fields: #""android":{"collapse_key":1}"#), field: "message.android.collapse_key"),
        .init(name: "unknown android field", body: Harness.body(token: token, fields: #""android":{"urgency":"high"}"#), field: "message.android.urgency"),
        .init(name: "title number", body: Harness.body(token: token, fields: #""notification":{"title":5}"#), field: "message.notification.title"),
        .init(name: "unknown notification field", body: Harness.body(token: token, fields: #""notification":{"sound":"x"}"#), field: "message.notification.sound"),
        .init(name: "unknown message field", body: Harness.body(token: token, fields: #""priority":"high""#), field: "message.priority"),
        .init(name: "apns not an object", body: Harness.body(token: token, fields: #""apns":"x""#), field: "message.apns"),
        .init(name: "analytics label with a space", body: Harness.body(token: token, fields: #""fcm_options":{"analytics_label":"a b"}"#),
              field: "message.fcm_options.analytics_label"),
        .init(name: "analytics label too long", body: Harness.body(token: token, fields: #""fcmOptions":{"analyticsLabel":"\#(String(repeating: "a", count: 51))"}"#),
              field: "message.fcm_options.analytics_label"),
        .init(name: "analytics label empty", body: Harness.body(token: token, fields: #""fcm_options":{"analytics_label":""}"#),
              field: "message.fcm_options.analytics_label"),
        .init(name: "notification count negative", body: Harness.body(token: token, fields: #""android":{"notification":{"notification_count":-1}}"#),
              field: "message.android.notification.notification_count"),
        .init(name: "notification count a fraction", body: Harness.body(token: token, fields: #""android":{"notification":{"notificationCount":2.5}}"#),
              field: "message.android.notification.notification_count"),
        .init(name: "notification count a string", body: Harness.body(token: token, fields: #""android":{"notification":{"notification_count":"3"}}"#),
              field: "message.android.notification.notification_count"),
        .init(name: "too large", body: Harness.body(token: token, fields: #""data":{"big":"\#(String(repeating: "x", count: 4090))"}"#), field: "message"),
        .init(name: "no target", body: #"{"message":{"data":{"a":"b"}}}"#, field: "message"),
        .init(name: "topic target", body: #"{"message":{"topic":"news"}}"#, field: "message.topic"),
        .init(name: "condition target", body: #"{"message":{"condition":"'a' in topics"}}"#, field: "message.condition"),
        .init(name: "two targets", body: #"{"message":{"token":"\#(token)","topic":"news"}}"#, field: "message"),
        .init(name: "token a number", body: #"{"message":{"token":42}}"#, field: "message.token"),
        .init(name: "no message", body: #"{"validate_only":false}"#, field: "message"),
        .init(name: "message not an object", body: #"{"message":"hi"}"#, field: "message"),
        .init(name: "unknown top-level field", body: #"{"message":{"token":"\#(token)"},"dry_run":true}"#, field: "dry_run"),
        .init(name: "validate_only a string", body: #"{"validate_only":"yes","message":{"token":"\#(token)"}}"#, field: "validate_only"),
        .init(name: "not JSON", body: "{message", field: nil),
        .init(name: "JSON array", body: "[]", field: nil),
    ]

    @Test(arguments: invalidCases)
    func invalidMessagesNameTheField(_ testCase: InvalidCase) async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let outcome = try await harness.send(client, body: testCase.body, accessToken: accessToken)
            #expect(outcome.status == 400, "\(outcome)")
            let error = try #require(outcome.json?["error"] as? [String: Any], "\(outcome)")
            #expect(error["status"] as? String == "INVALID_ARGUMENT")
            #expect(outcome.errorDetailTypes.contains("type.googleapis.com/google.rpc.BadRequest"))
            let details = try #require(error["details"] as? [[String: Any]])
            let badRequest = try #require(details.first { $0["@type"] as? String == "type.googleapis.com/google.rpc.BadRequest" })
            let violations = try #require(badRequest["fieldViolations"] as? [[String: Any]])
            #expect(violations.count == 1)
            #expect(violations.first?["field"] as? String == testCase.field, "\(outcome)")
            #expect((violations.first?["description"] as? String)?.isEmpty == false)
            // pgpush reads a job-level error for everything but the token.
            let delivery = try #require(outcome.fcmResponse.map { classify($0) })
            if testCase.field == "message.token" {
                #expect(delivery == .tokenWrongForTopicOrEnvironment(reason: "INVALID_ARGUMENT"))
            } else if case .jobError = delivery {
            } else {
                Issue.record("\(testCase.name) classified as \(delivery)")
            }
            #expect(harness.simulator.ledger.acceptedCount == 0)
        }
    }

    /// A sender sends one message to many tokens on one connection; the simulator may skip re-parsing a body
    /// that differs from the last one only in the token, but every send must still be judged on its own.
    @Test func oneMessageToManyTokensIsJudgedPerSend() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let fields = #""notification":{"title":"Hi"},"data":{"order":"42"}"#
            func send(_ body: String) async throws -> SimulatorRawClient.Outcome {
                try await harness.send(client, body: body, accessToken: accessToken)
            }
            for index in 0..<3 {
                #expect(try await send(Harness.body(token: Harness.token(100 + index), fields: fields)).status == 200)
            }
            #expect(Set(harness.simulator.ledger.entries.map(\.token)) == Set((100..<103).map { Harness.token($0) }))
            // Same bytes around the token, but the token is dead, malformed, or too long.
            let dead = try await send(Harness.body(token: "dead-" + Harness.token(1), fields: fields))
            #expect(dead.fcmResponse?.errorCode == "UNREGISTERED", "\(dead)")
            let malformed = try await send(Harness.body(token: "bad/token" + Harness.token(1), fields: fields))
            #expect(malformed.status == 400, "\(malformed)")
            let tooLong = try await send(Harness.body(token: String(repeating: "a", count: 4097), fields: fields))
            #expect(tooLong.status == 400, "\(tooLong)")
            // One byte changed elsewhere is parsed again: a number where a string must be.
            let badData = try await send(Harness.body(token: Harness.token(104), fields: #""notification":{"title":"Hi"},"data":{"order":42}"#))
            #expect(badData.status == 400, "\(badData)")
            // A data key named "token" beside a target spelled with spaces: only the target counts.
            for (index, dataToken) in [(105, Harness.token(105)), (106, Harness.token(999))] {
                let lookAlike = #"{"message":{"data":{"token":"\#(dataToken)"},"token" : "\#(Harness.token(105))"}}"#
                #expect(try await send(lookAlike).status == 200, "send \(index)")
                #expect(harness.simulator.ledger.entries.last?.token == Harness.token(105), "send \(index)")
            }
            // validate_only is part of the bytes: the same message with the flag is validated, not recorded.
            let dryRun = try await send(Harness.body(token: Harness.token(110), fields: fields, validateOnly: true))
            #expect(dryRun.json?["name"] as? String == "projects/\(Harness.projectID)/messages/fake_message_id")
            #expect(try await send(Harness.body(token: Harness.token(111), fields: fields, validateOnly: true)).status == 200)
            #expect(harness.simulator.ledger.acceptedCount == 5)
            #expect(harness.simulator.ledger.count(forToken: Harness.token(111)) == 0)
        }
    }

    @Test func messagesUpToTheLimitAndFCMsSpellingsAreAccepted() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            // {"data":{"big":"…"}} is 19 bytes around the value: exactly 4096 bytes without the token, then one more.
            let fits = Harness.body(token: Harness.token(8), fields: #""data":{"big":"\#(String(repeating: "x", count: 4096 - 19))"}"#)
            #expect(try await harness.send(client, body: fits, accessToken: accessToken).status == 200)
            let over = Harness.body(token: Harness.token(8), fields: #""data":{"big":"\#(String(repeating: "x", count: 4096 - 18))"}"#)
            #expect(try await harness.send(client, body: over, accessToken: accessToken).status == 400)
            let accepted: [String] = [
                #""android":{"priority":"normal","ttl":"0s"}"#,
                #""android":{"priority":"high","ttl":"2419200s","collapseKey":"c","directBootOk":true}"#,
                #""android":{"ttl":"1.5s","notification":{"channel_id":"x"},"restricted_package_name":"com.example"}"#,
                #""data":{"googlish":"fine","fromage":"fine"},"notification":{"image":"https://example.com/a.png"}"#,
                #""apns":{"payload":{"aps":{}}},"webpush":{},"fcm_options":{"analytics_label":"l"}"#,
                #""fcmOptions":{"analyticsLabel":"spring_sale-2024.v1~%41"},"android":{"notification":{"notification_count":0}}"#,
                #""android":{"notification":{"notificationCount":2147483647,"channel_id":"x"}}"#,
                "",
            ]
            for (index, fields) in accepted.enumerated() {
                let outcome = try await harness.send(client, body: Harness.body(token: Harness.token(20 + index), fields: fields),
                                                     accessToken: accessToken)
                #expect(outcome.status == 200, "\(fields): \(outcome)")
            }
            #expect(harness.simulator.ledger.acceptedCount == accepted.count + 1)
        }
    }

    @Test func otherPathsAndMethodsAreNotFound() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let paths = ["/v1/projects/\(Harness.projectID)/messages:batchSend", "/v1/projects//messages:send",
                         "/v1/projects/a/b/messages:send", "/batch", "/"]
            for path in paths {
                let outcome = try await client.request(path: path, headers: [("authorization", "Bearer \(accessToken)")],
                                                       body: Harness.body(token: Harness.token(1)))
                #expect(outcome.status == 404, "\(path)")
                #expect((outcome.json?["error"] as? [String: Any])?["status"] as? String == "NOT_FOUND")
            }
            let get = try await client.request(method: "GET", path: "/v1/projects/\(Harness.projectID)/messages:send",
                                               headers: [("authorization", "Bearer \(accessToken)")], body: nil)
            #expect(get.status == 404)
            // A query string does not change the route.
            let withQuery = try await client.request(
                path: "/v1/projects/\(Harness.projectID)/messages:send?alt=json",
                headers: [("authorization", "Bearer \(accessToken)")], body: Harness.body(token: Harness.token(1)))
            #expect(withQuery.status == 200)
        }
    }
}
