import Crypto
import Foundation
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing

@testable import PGPushSimulator

/// Per-device content: the APNs ledger can keep what each device received, and the FCM validator checks the
/// fields a per-device message varies (`notification_count`) or tags (`fcm_options.analytics_label`).
/// No sockets: the APNs connection runs on an `EmbeddedChannel`.
@Suite("Simulators: per-device content")
struct SimulatorPerDeviceContentTests {
    // MARK: APNs ledger payloads

    /// Any channel handler: only there to lend ``SimulatorConnection/write`` a context.
    final class ContextHolder: ChannelInboundHandler {
        typealias InboundIn = NIOAny
    }

    /// Sends each (token, payload) through a certificate-authenticated ``SimulatorConnection`` and writes the
    /// answers, as the stream handler would; returns the server context whose ledger recorded them.
    private func sendThroughConnection(_ requests: [(token: String, payload: String)],
                                       configure: (inout APNsSimulatorConfiguration) -> Void = { _ in })
        throws -> SimulatorServerContext {
        var configuration = APNsSimulatorConfiguration()
        configuration.channelsPort = nil
        configure(&configuration)
        let server = SimulatorServerContext(configuration: configuration)
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish() }
        try channel.pipeline.syncOperations.addHandler(ContextHolder())
        let context = try channel.pipeline.syncOperations.context(handlerType: ContextHolder.self)
        let connection = SimulatorConnection(server: server, channel: channel, abruptCloser: AbruptCloseHandler(),
                                             certificateTopics: [], number: 1)
        for (index, request) in requests.enumerated() {
            let headers = HPACKHeaders([(":method", "POST"), (":path", "/3/device/\(request.token)"),
                                        ("apns-topic", "com.example.app"), ("apns-push-type", "alert")])
            let streamID = 2 * index + 1
            guard case .respond(let response, _) = connection.handleRequest(
                streamID: streamID, headers: headers, body: ByteBuffer(string: request.payload))
            else {
                Issue.record("request \(index) left unanswered")
                continue
            }
            #expect(response.status == 200, "request \(index): \(response.reason ?? "")")
            connection.write(response, streamID: streamID, context: context)
        }
        return server
    }

    private static func sha256(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Two devices, two variants of one notification: each entry holds exactly the bytes its device got.
    @Test func apnsLedgerKeepsEachDevicesPayloadWhenAsked() throws {
        let requests = [
            (token: SimulatorHarness.token(1), payload: #"{"aps":{"alert":"Hello","badge":3}}"#),
            (token: SimulatorHarness.token(2), payload: "{ \"aps\" : {\"alert\":\"Grüß dich 👋\",\"badge\":12} }\n"),
            (token: SimulatorHarness.token(1), payload: #"{"aps":{"alert":"Hello","badge":4},"k":"a\"b\\c"}"#),
        ]
        let server = try sendThroughConnection(requests) { $0.ledgerKeepsPayloads = true }
        let entries = server.ledger.entries
        #expect(entries.map(\.token) == requests.map(\.token))
        #expect(entries.map(\.payload) == requests.map(\.payload))
        #expect(entries.map(\.payloadSHA256) == requests.map { Self.sha256($0.payload) })
        #expect(server.ledger.count(forToken: SimulatorHarness.token(1)) == 2)

        // Payloads are forgotten with their entries and stay in step with the next ones.
        server.ledger.reset()
        #expect(server.ledger.entries.isEmpty)
        server.ledger.record(SimulatorLedger.StoredEntry(token: "ab", apnsID: UUID(), topic: nil, payloadSHA256: nil,
                                                         receivedAt: Date()), payload: "{}")
        #expect(server.ledger.entries.map(\.payload) == ["{}"])
    }

    @Test func apnsLedgerKeepsOnlyTheDigestByDefault() throws {
        #expect(APNsSimulatorConfiguration().ledgerKeepsPayloads == false)
        let payload = #"{"aps":{"alert":"Hello","badge":3}}"#
        let server = try sendThroughConnection([(SimulatorHarness.token(1), payload)])
        #expect(server.ledger.keepsPayloads == false)
        let entry = try #require(server.ledger.entries.first)
        #expect(entry.payload == nil)
        #expect(entry.payloadSHA256 == Self.sha256(payload))
        // Given a payload anyway, a ledger that does not keep them drops it.
        server.ledger.record(SimulatorLedger.StoredEntry(token: "ab", apnsID: UUID(), topic: nil, payloadSHA256: nil,
                                                         receivedAt: Date()), payload: payload)
        #expect(server.ledger.entries.map(\.payload) == [nil, nil])
    }

    @Test func apnsLedgerEntriesDecodeWithOrWithoutAPayload() throws {
        // A line of a ledger written before payloads existed (the Date is Codable's default, seconds since 2001).
        let old = #"{"token":"ab","apnsID":"1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9","topic":null,"payloadSHA256":"00","receivedAt":0}"#
        let decoded = try JSONDecoder().decode(SimulatorLedgerEntry.self, from: Data(old.utf8))
        #expect(decoded.token == "ab")
        #expect(decoded.payload == nil)

        var entry = decoded
        let withoutPayload = try JSONSerialization.jsonObject(with: JSONEncoder().encode(entry)) as? [String: Any]
        #expect(withoutPayload?["payload"] == nil)
        entry.payload = #"{"aps":{"badge":7}}"#
        let roundTripped = try JSONDecoder().decode(SimulatorLedgerEntry.self, from: JSONEncoder().encode(entry))
        #expect(roundTripped == entry)
        #expect(roundTripped.payload == #"{"aps":{"badge":7}}"#)
    }

    @Test(arguments: [false, true])
    func apnsLedgerFileLinesCarryThePayloadOnlyWhenKept(_ keepsPayloads: Bool) throws {
        let file = NSTemporaryDirectory() + "pgpush-ledger-payload-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let ledger = SimulatorLedger(ledgerFile: file, keepsPayloads: keepsPayloads)
        let payload = "{\"aps\":{\"alert\":\"line\\nbreak \\\"quoted\\\" ü\"}}\n"
        ledger.record(SimulatorLedger.StoredEntry(token: "ab", apnsID: UUID(), topic: "t", payloadSHA256: nil,
                                                  receivedAt: Date()), payload: payload)
        ledger.flush()
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 1)
        let line = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect(line["token"] as? String == "ab")
        if keepsPayloads {
            #expect(line["payload"] as? String == payload)
        } else {
            #expect(line["payload"] == nil)
            #expect(!lines[0].contains("payload\""))
        }
    }

    // MARK: FCM validation

    static let token = "fcm-token_1:APA91b" + String(repeating: "x", count: 40)

    static func body(token: String = token, _ fields: String) -> String {
        #"{"message":{"token":"\#(token)",\#(fields)}}"#
    }

    static func verdict(_ body: String) -> Result<FCMValidatedSend, FCMSimulatorError> {
        FCMMessageValidator.validate(Data(body.utf8), keepMessage: false)
    }

    /// The field of the BadRequest violation of a 400 INVALID_ARGUMENT, or `nil` when the body was accepted.
    static func rejectedField(_ result: Result<FCMValidatedSend, FCMSimulatorError>) -> String? {
        guard case .failure(let error) = result else { return nil }
        #expect(error.httpStatus == 400)
        #expect(error.status == "INVALID_ARGUMENT")
        #expect(error.fieldViolations.count == 1)
        return error.fieldViolations.first?.field ?? "(no field)"
    }

    static let acceptedLabels = ["l", "campaign_2024-06.v2~a%20b", String(repeating: "a", count: 50), "ABC-xyz_09"]
    static let rejectedLabels = [#""""#, #""\#(String(repeating: "a", count: 51))""#, #""with space""#, #""slash/no""#,
                                 #""plus+no""#, #""ümlaut""#, #""a:b""#, "42", "true", #"["a"]"#, #"{"a":"b"}"#]

    @Test func analyticsLabelsMatchingFCMsPatternAreAccepted() throws {
        for label in Self.acceptedLabels {
            for spelling in [#""fcm_options":{"analytics_label":"\#(label)"}"#, #""fcmOptions":{"analyticsLabel":"\#(label)"}"#] {
                let validated = try Self.verdict(Self.body(spelling)).get()
                #expect(validated.token == Self.token, "\(spelling)")
            }
        }
        // Absent or null is no label; the other fcm_options members are still not looked into.
        #expect(Self.rejectedField(Self.verdict(Self.body(#""fcm_options":{}"#))) == nil)
        #expect(Self.rejectedField(Self.verdict(Self.body(#""fcm_options":{"analytics_label":null}"#))) == nil)
        #expect(Self.rejectedField(Self.verdict(Self.body(#""fcmOptions":{"other":1}"#))) == nil)
    }

    @Test func otherAnalyticsLabelsAreInvalidArguments() {
        for label in Self.rejectedLabels {
            for spelling in [#""fcm_options":{"analytics_label":\#(label)}"#, #""fcmOptions":{"analyticsLabel":\#(label)}"#,
                             #""fcm_options":{"analyticsLabel":\#(label)}"#] {
                #expect(Self.rejectedField(Self.verdict(Self.body(spelling))) == "message.fcm_options.analytics_label",
                        "\(spelling)")
            }
        }
    }

    @Test func notificationCountsThatAreInt32sNotBelowZeroAreAccepted() throws {
        for count in ["0", "1", "42", "2147483647", "null"] {
            for spelling in ["notification_count", "notificationCount"] {
                let body = Self.body(#""android":{"notification":{"title":"t","\#(spelling)":\#(count)}}"#)
                #expect(Self.rejectedField(Self.verdict(body)) == nil, "\(body)")
            }
        }
    }

    @Test func otherNotificationCountsAreInvalidArguments() {
        for count in ["-1", "-2147483648", "1.5", "1.0", "1e2", "2147483648", "99999999999999999999", #""3""#, "true",
                      "false", "[1]", "{}"] {
            for spelling in ["notification_count", "notificationCount"] {
                let body = Self.body(#""android":{"notification":{"\#(spelling)":\#(count)}}"#)
                #expect(Self.rejectedField(Self.verdict(body)) == "message.android.notification.notification_count",
                        "\(body)")
            }
        }
    }

    @Test func jsonIntegersAreTheNumbersWrittenWithoutFractionOrExponent() throws {
        func parsed(_ text: String) throws -> Any {
            let object = try JSONSerialization.jsonObject(with: Data(#"{"n":\#(text)}"#.utf8)) as? [String: Any]
            return try #require(object?["n"])
        }
        #expect(FCMMessageValidator.jsonInteger(try parsed("0")) == 0)
        #expect(FCMMessageValidator.jsonInteger(try parsed("-7")) == -7)
        #expect(FCMMessageValidator.jsonInteger(try parsed("4294967296")) == 4_294_967_296)
        for text in ["1.0", "0.5", "1e2", "true", "false", #""1""#, "null", "99999999999999999999"] {
            #expect(FCMMessageValidator.jsonInteger(try parsed(text)) == nil, "\(text)")
        }
    }

    // MARK: FCM validation memo

    private static func memoVerdict(_ memo: inout FCMValidationMemo, _ body: String)
        -> Result<FCMValidatedSend, FCMSimulatorError> {
        memo.validate(ByteBuffer(string: body), keepMessage: true)
    }

    /// Per-device bodies: one job's message with each device's own badge count. The memo serves only bodies that
    /// differ from the remembered valid one in the token; a body with another count is judged on its own.
    @Test func theMemoJudgesBodiesThatDifferInTheirNotificationCount() throws {
        var memo = FCMValidationMemo()
        func body(_ device: Int, count: String, label: String = "job-7") -> String {
            Self.body(token: "fcm-token_\(device):APA91b" + String(repeating: "x", count: 40),
                      #""notification":{"title":"Hi"},"android":{"notification":{"notification_count":\#(count)}},"fcm_options":{"analytics_label":"\#(label)"}"#)
        }
        let sequence: [(device: Int, count: String, label: String, accepted: Bool)] = [
            (1, "1", "job-7", true),
            (2, "1", "job-7", true),     // served from the memo
            (3, "-1", "job-7", false),   // differs in the count only: parsed, refused
            (4, "1", "job-7", true),     // the memo still holds the count-1 body
            (5, "2", "job-7", true),     // a new valid body replaces it
            (6, "1.5", "job-7", false),
            (7, "-2", "job-7", false),
            (8, "2", "job-7", true),
            (9, "2", "job 7", false),    // differs in the label only
            (10, "2", "job-7", true),
            (11, "2147483648", "job-7", false),
            (12, "true", "job-7", false),
            (13, "3", "job-7", true),
        ]
        for step in sequence {
            let text = body(step.device, count: step.count, label: step.label)
            let memoized = Self.memoVerdict(&memo, text)
            let direct = FCMMessageValidator.validate(Data(text.utf8), keepMessage: true)
            switch (memoized, direct) {
            case (.success(let viaMemo), .success(let parsed)):
                #expect(step.accepted, "device \(step.device) accepted")
                #expect(viaMemo.token == parsed.token)
                #expect(viaMemo.token.hasPrefix("fcm-token_\(step.device):"))
                #expect(viaMemo.messageJSON == text)
                #expect(viaMemo.validateOnly == parsed.validateOnly)
            case (.failure(let viaMemo), .failure(let parsed)):
                #expect(!step.accepted, "device \(step.device) refused")
                #expect(viaMemo == parsed)
            default:
                Issue.record("device \(step.device): memo \(memoized), parser \(direct)")
            }
        }
    }
}

@Suite("Simulators: per-device content over HTTP/2", .network, .timeLimit(.minutes(1)))
struct SimulatorPerDeviceContentNetworkTests {
    /// A job sends each device its own payload (locale, badge); the ledger shows which device got which.
    @Test func apnsLedgerShowsWhatEachDeviceReceived() async throws {
        try await SimulatorHarness.with(configure: { $0.ledgerKeepsPayloads = true }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let variants = [
                (SimulatorHarness.token(1), #"{"aps":{"alert":"Hello","badge":1}}"#),
                (SimulatorHarness.token(2), #"{"aps":{"alert":"Bonjour","badge":5}}"#),
                (SimulatorHarness.token(3), #"{"aps":{"alert":"Grüß dich","badge":12}}"#),
            ]
            for (token, payload) in variants {
                let outcome = try await client.request(path: "/3/device/\(token)", headers: harness.headers(), body: payload)
                #expect(outcome.status == 200)
            }
            // Refused notifications are not in the ledger.
            let dead = try await client.request(path: "/3/device/\(SimulatorHarness.token(4, prefix: "dead"))",
                                                headers: harness.headers(), body: #"{"aps":{"badge":9}}"#)
            #expect(dead.status == 410)
            let received = Dictionary(uniqueKeysWithValues: harness.simulator.ledger.entries.map { ($0.token, $0.payload) })
            #expect(received == Dictionary(uniqueKeysWithValues: variants.map { ($0.0, Optional($0.1)) }))
        }
    }

    /// One connection, one job, each device its own badge count: a bad count after good ones is refused, and the
    /// ledger holds each device's own message.
    @Test func fcmSendsWithPerDeviceCountsAreEachJudgedAndRecorded() async throws {
        typealias Harness = FCMSimulatorHarness
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            func body(_ device: Int, count: String) -> String {
                Harness.body(token: Harness.token(device),
                             fields: #""notification":{"title":"Hi"},"android":{"notification":{"notification_count":\#(count)}},"fcm_options":{"analytics_label":"job-7"}"#)
            }
            let steps: [(device: Int, count: String, status: Int)] = [
                (1, "1", 200), (2, "1", 200), (3, "-1", 400), (4, "1", 200), (5, "7", 200), (6, "0.5", 400), (7, "7", 200),
            ]
            for step in steps {
                let outcome = try await harness.send(client, body: body(step.device, count: step.count), accessToken: accessToken)
                #expect(outcome.status == step.status, "device \(step.device): \(outcome)")
            }
            var counts: [String: Int] = [:]
            for entry in harness.simulator.ledger.entries {
                let android = entry.messageObject?["android"] as? [String: Any]
                counts[entry.token] = (android?["notification"] as? [String: Any])?["notification_count"] as? Int
            }
            #expect(counts == [Harness.token(1): 1, Harness.token(2): 1, Harness.token(4): 1, Harness.token(5): 7,
                               Harness.token(7): 7])
        }
    }

    @Test func apnsLedgerHasNoPayloadsByDefault() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let outcome = try await client.request(path: "/3/device/\(SimulatorHarness.token(1))", headers: harness.headers(),
                                                   body: SimulatorHarness.payload)
            #expect(outcome.status == 200)
            #expect(harness.simulator.ledger.entries.map(\.payload) == [nil])
        }
    }
}
