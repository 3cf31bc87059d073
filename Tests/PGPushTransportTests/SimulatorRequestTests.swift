import Crypto
import Foundation
import PGPushSimulator
import Testing

@Suite("APNs simulator: requests and validation", .network)
struct SimulatorRequestTests {
    @Test(.timeLimit(.minutes(1)))
    func validTokenRequestIsAcceptedAndRecorded() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let token = SimulatorHarness.token(1)
            let apnsID = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9"
            let outcome = try await client.request(
                path: "/3/device/\(token)", headers: harness.headers(extra: [("apns-id", apnsID)]),
                body: SimulatorHarness.payload)
            #expect(outcome.status == 200)
            #expect(outcome.apnsID == apnsID)

            let entries = harness.simulator.ledger.entries
            #expect(entries.count == 1)
            let entry = try #require(entries.first)
            #expect(entry.token == token)
            #expect(entry.apnsID == apnsID)
            #expect(entry.topic == SimulatorHarness.topic)
            let expectedHash = SHA256.hash(data: Data(SimulatorHarness.payload.utf8))
                .map { String(format: "%02x", $0) }.joined()
            #expect(entry.payloadSHA256 == expectedHash)
            #expect(harness.simulator.statistics.count(status: 200) == 1)

            // Without an apns-id the simulator generates a canonical one.
            let second = try await client.request(
                path: "/3/device/\(token)", headers: harness.headers(), body: SimulatorHarness.payload)
            #expect(second.status == 200)
            #expect(UUID(uuidString: second.apnsID ?? "") != nil)
            #expect(harness.simulator.ledger.duplicates[token] == 2)
            #expect(harness.simulator.ledger.count(forToken: token) == 2)
        }
    }

    struct InvalidCase: Sendable, CustomTestStringConvertible {
        var name: String
        var method = "POST"
        var path = "/3/device/" + SimulatorHarness.token(7)
        var dropTopic = false
        var pushType = "alert"
        var extra: [(String, String)] = []
        var topic = SimulatorHarness.topic
        var body: String? = SimulatorHarness.payload
        var status: Int
        var reason: String
        var testDescription: String { name }
    }

    static let invalidCases: [InvalidCase] = [
        .init(name: "GET", method: "GET", status: 405, reason: "MethodNotAllowed"),
        .init(name: "wrong path", path: "/2/device/abcd", status: 404, reason: "BadPath"),
        .init(name: "no token", path: "/3/device/", status: 400, reason: "MissingDeviceToken"),
        .init(name: "non-hex token", path: "/3/device/" + String(repeating: "zz", count: 32), status: 400, reason: "BadDeviceToken"),
        .init(name: "short token", path: "/3/device/abcdef", status: 400, reason: "BadDeviceToken"),
        .init(name: "missing topic", dropTopic: true, status: 400, reason: "MissingTopic"),
        .init(name: "unknown push type", pushType: "fax", status: 400, reason: "InvalidPushType"),
        .init(name: "voip without suffix", pushType: "voip", status: 400, reason: "BadTopic"),
        .init(name: "priority 7", extra: [("apns-priority", "7")], status: 400, reason: "BadPriority"),
        .init(name: "expiration text", extra: [("apns-expiration", "soon")], status: 400, reason: "BadExpirationDate"),
        .init(name: "long collapse id", extra: [("apns-collapse-id", String(repeating: "c", count: 65))], status: 400, reason: "BadCollapseId"),
        .init(name: "bad apns-id", extra: [("apns-id", "not-a-uuid")], status: 400, reason: "BadMessageId"),
        .init(name: "duplicate priority", extra: [("apns-priority", "10"), ("apns-priority", "5")], status: 400, reason: "DuplicateHeaders"),
        .init(name: "empty body", body: nil, status: 400, reason: "PayloadEmpty"),
        .init(name: "array body", body: "[1,2]", status: 400, reason: "PayloadEmpty"),
        .init(name: "4097-byte body", body: #"{"a":""# + String(repeating: "x", count: 4097 - 8) + #""}"#, status: 413, reason: "PayloadTooLarge"),
        .init(name: "disallowed topic", topic: "com.other.app", status: 400, reason: "TopicDisallowed"),
    ]

    @Test(.timeLimit(.minutes(1)), arguments: invalidCases)
    func invalidRequestsGetAPNsReasons(_ testCase: InvalidCase) async throws {
        try await SimulatorHarness.with(configure: { $0.allowedTopics = [SimulatorHarness.topic] }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            var headers = [("authorization", "bearer \(harness.jwt)"), ("apns-push-type", testCase.pushType)]
            if !testCase.dropTopic { headers.append(("apns-topic", testCase.topic)) }
            headers += testCase.extra
            let outcome = try await client.request(method: testCase.method, path: testCase.path, headers: headers,
                                                   body: testCase.body)
            #expect(outcome.status == testCase.status, "\(outcome)")
            #expect(outcome.reason == testCase.reason)
            #expect(harness.simulator.ledger.acceptedCount == 0)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func voipAllowsLargerPayloadsOnItsTopic() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            // VoIP allows 5120 bytes and needs the .voip topic suffix.
            let voipBody = #"{"a":""# + String(repeating: "v", count: 5000) + #""}"#
            let voip = try await client.request(
                path: "/3/device/\(SimulatorHarness.token(3))",
                headers: [("authorization", "bearer \(harness.jwt)"), ("apns-topic", SimulatorHarness.topic + ".voip"),
                          ("apns-push-type", "voip")],
                body: voipBody)
            #expect(voip.status == 200)
        }
    }
}
