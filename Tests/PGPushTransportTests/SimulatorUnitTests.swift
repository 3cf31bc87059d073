import Foundation
import NIOCore
import NIOHPACK
import Testing

@testable import PGPushSimulator

@Suite("APNs simulator: pure parts")
struct SimulatorUnitTests {
    let validator = SimulatorRequestValidator(tokenHexLength: 64...200, allowedTopics: nil)
    let token = String(repeating: "ab", count: 32)

    private func validate(_ extra: [(String, String)], body: String = #"{"aps":{}}"#,
                          certificateTopics: [String]? = nil) -> Result<ValidatedRequest, SimulatorRejection> {
        var headers = HPACKHeaders([(":method", "POST"), (":path", "/3/device/\(token.uppercased())")])
        for (name, value) in extra { headers.add(name: name, value: value) }
        return validator.validate(headers: headers, body: ByteBuffer(string: body), certificateTopics: certificateTopics)
    }

    @Test func validRequestIsNormalised() throws {
        let request = try validate([("apns-topic", "com.example.app"), ("authorization", "Bearer abc")]).get()
        #expect(request.token == token)  // lowercased
        #expect(request.topic == "com.example.app")
        #expect(request.bearerToken == "abc")
        #expect(request.apnsID == nil)
    }

    @Test func certificateConnectionsDefaultTheTopic() throws {
        let request = try validate([], certificateTopics: ["com.example.app"]).get()
        #expect(request.topic == "com.example.app")
        #expect(try validate([], certificateTopics: []).get().topic == nil)
    }

    @Test func whitespaceAroundAJSONObjectIsFine() {
        #expect(SimulatorRequestValidator.looksLikeJSONObject(ByteBuffer(string: " \n{\"a\":1}\n")))
        #expect(!SimulatorRequestValidator.looksLikeJSONObject(ByteBuffer(string: "\"text\"")))
        #expect(!SimulatorRequestValidator.looksLikeJSONObject(ByteBuffer(string: "   ")))
    }

    @Test func canonicalUUIDs() {
        #expect(SimulatorRequestValidator.isCanonicalUUID("1F2E3D4C-5B6A-4978-8695-A4B3C2D1E0F9"))
        #expect(!SimulatorRequestValidator.isCanonicalUUID("1F2E3D4C5B6A49788695A4B3C2D1E0F9"))
        #expect(!SimulatorRequestValidator.isCanonicalUUID("1F2E3D4C-5B6A-4978-8695-A4B3C2D1E0FG"))
    }

    @Test func registryListsWinOverPrefixRules() {
        var registry = SimulatorTokenRegistry()
        let dead = "dead" + String(repeating: "0", count: 60)
        registry.tokenTopics[dead] = "com.example.app"
        let now = Date(timeIntervalSince1970: 1_000_000)
        #expect(registry.outcome(forToken: dead, topic: "com.example.app", now: now) == .valid)
        #expect(registry.outcome(forToken: "dead" + String(repeating: "1", count: 60), topic: nil, now: now)
            == .unregistered(timestampMilliseconds: (1_000_000 - 86_400) * 1000))
        registry.unregisteredPrefix = nil
        #expect(registry.outcome(forToken: "dead" + String(repeating: "1", count: 60), topic: nil, now: now) == .valid)
        registry.badDeviceTokenByDefault = true
        registry.validTokens = [token]
        #expect(registry.outcome(forToken: token, topic: nil, now: now) == .valid)
        #expect(registry.outcome(forToken: "cd" + token.dropFirst(2), topic: nil, now: now) == .badDeviceToken)
    }

    @Test func faultHashIsStableAndSeeded() {
        let a = FaultHash.hash(token, seed: 1, salt: 429)
        #expect(a == FaultHash.hash(token, seed: 1, salt: 429))
        #expect(a != FaultHash.hash(token, seed: 2, salt: 429))
        #expect(a != FaultHash.hash(token, seed: 1, salt: 500))
        let unit = FaultHash.unit(a)
        #expect(unit >= 0 && unit < 1)
        // Roughly uniform: of 1000 tokens, a 30% fraction selects between 20% and 40%.
        let selected = (0..<1000).filter { FaultHash.unit(FaultHash.hash("\($0)", seed: 9, salt: 429)) < 0.3 }.count
        #expect((200...400).contains(selected))
    }

    @Test func providerTokenParsing() throws {
        let signer = SimulatorTestSigner()
        let jwt = try signer.token(issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let parsed = try #require(ParsedProviderToken(jwt[...]))
        #expect(parsed.keyID == signer.keyID)
        #expect(parsed.teamID == signer.teamID)
        #expect(parsed.issuedAt == 1_700_000_000)
        #expect(parsed.isSigned(by: signer.key.publicKey))
        #expect(!parsed.isSigned(by: SimulatorTestSigner().key.publicKey))
        #expect(ParsedProviderToken("a.b"[...]) == nil)
        #expect(ParsedProviderToken((jwt + "x")[...]).map { $0.isSigned(by: signer.key.publicKey) } != true)
    }

    @Test func tokenKeysLoadFromPrivateOrPublicPEM() throws {
        let signer = SimulatorTestSigner()
        let fromPrivate = try SimulatorTokenKey(teamID: "T", keyID: "K", pem: signer.key.pemRepresentation)
        let fromPublic = try SimulatorTokenKey(teamID: "T", keyID: "K", pem: signer.key.publicKey.pemRepresentation)
        #expect(fromPrivate.publicKey.rawRepresentation == signer.key.publicKey.rawRepresentation)
        #expect(fromPublic.publicKey.rawRepresentation == signer.key.publicKey.rawRepresentation)
        #expect(throws: (any Error).self) { try SimulatorTokenKey(teamID: "T", keyID: "K", pem: "nonsense") }
    }

    @Test func fcmJSONStringsAreEscapedAsJSONParsersReadThem() throws {
        let samples = ["projects/p/messages/0:1700000000000%00000000000000ff", "", "say \"hi\"", "back\\slash",
                       "line\nbreak\r\ttab", "bell\u{07}", "ünïcödé ✓ 🙂", "\u{1F}\"\u{00}"]
        for sample in samples {
            let quoted = FCMSimulatorJSON.quoted(sample)
            let parsed = try JSONSerialization.jsonObject(with: Data(quoted.utf8), options: .fragmentsAllowed) as? String
            #expect(parsed == sample, "\(quoted)")
        }
        #expect(FCMSimulatorJSON.quoted("a\"b") == #""a\"b""#)
        #expect(FCMSimulatorJSON.quoted("\u{01}") == #""\u0001""#)
    }

    @Test func fcmSendPathNamesItsProject() {
        #expect(FCMSimulatorConnection.sendProject("/v1/projects/demo-project/messages:send") == "demo-project")
        #expect(FCMSimulatorConnection.sendProject("/v1/projects/ünï/messages:send") == "ünï")
        for path in ["/v1/projects//messages:send", "/v1/projects/a/b/messages:send", "/v1/projects/a/messages:batchSend",
                     "/v1/projects/messages:send", "/v2/projects/a/messages:send", "", "/"] {
            #expect(FCMSimulatorConnection.sendProject(path) == nil, "\(path)")
        }
    }
}

@Suite("APNs simulator: lifecycle and ledger file", .network)
struct SimulatorLifecycleTests {
    @Test(.timeLimit(.minutes(1)))
    func ledgerFileGetsOneJSONLinePerAcceptedNotification() async throws {
        let file = NSTemporaryDirectory() + "pgpush-ledger-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: file) }
        try await SimulatorHarness.with(configure: { $0.ledgerFile = file }) { harness in
            let client = try await harness.connect()
            for index in 0..<3 {
                _ = try await client.request(path: "/3/device/\(SimulatorHarness.token(index))",
                                             headers: harness.headers(), body: SimulatorHarness.payload)
            }
            _ = try await client.request(path: "/3/device/\(SimulatorHarness.token(1, prefix: "dead"))",
                                         headers: harness.headers(), body: SimulatorHarness.payload)
            await client.close()
        }
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 3)
        let first = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any]
        #expect(first?["token"] as? String == SimulatorHarness.token(0))
        #expect(first?["topic"] as? String == SimulatorHarness.topic)
        #expect((first?["payloadSHA256"] as? String)?.count == 64)
    }

    @Test(.timeLimit(.minutes(1)))
    func runServesUntilCancelled() async throws {
        var configuration = APNsSimulatorConfiguration()
        let directory = NSTemporaryDirectory() + "pgpush-simulator-run-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        configuration.certificateDirectory = directory
        configuration.threadCount = 1
        let simulator = APNsSimulator(configuration: configuration, logger: .init(label: "run-test"))
        let task = Task { try await simulator.run() }
        var port: Int?
        for _ in 0..<500 where port == nil {
            port = simulator.port
            try await Task.sleep(for: .milliseconds(10))
        }
        let boundPort = try #require(port)
        #expect(boundPort > 0)
        #expect(FileManager.default.fileExists(atPath: simulator.caCertificatePath))
        let client = try await SimulatorRawClient.connect(port: boundPort, caPath: simulator.caCertificatePath)
        try await client.wait { !$0.maxConcurrentStreamsSettings.isEmpty }
        task.cancel()
        try await task.value
        #expect(simulator.port == nil)
        try await client.wait { $0.closed }
    }
}
