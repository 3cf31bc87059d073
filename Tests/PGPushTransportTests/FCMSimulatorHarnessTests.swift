import CryptoExtras
import Foundation
import Logging
import PGPushCore
import PGPushSimulator
import Testing

/// The RSA key of every trusted test service account (2048-bit key generation is slow in debug builds).
let fcmSimulatorTestKey: _RSA.Signing.PrivateKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
/// A key no test account is trusted with.
let fcmSimulatorUntrustedKey: _RSA.Signing.PrivateKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

/// A started FCM simulator trusting two service accounts (one per project), plus helpers for token exchanges
/// and sends over the raw HTTP/2 test client.
struct FCMSimulatorHarness: Sendable {
    static let projectID = "demo-project"
    static let otherProjectID = "other-project"
    static let clientEmail = "pgpush@demo-project.iam.gserviceaccount.com"
    static let otherClientEmail = "pgpush@other-project.iam.gserviceaccount.com"
    static let keyID = "0123456789abcdef"

    let simulator: FCMSimulator
    let port: Int
    let clock: SimulatorTestClock
    /// `demo-project`'s account, whose `token_uri` is this simulator's.
    let account: FCMServiceAccount
    /// `other-project`'s account, same key.
    let otherAccount: FCMServiceAccount

    var tokenURI: String { simulator.tokenURI! }

    /// Starts a simulator, runs `body`, and always shuts it down.
    static func with<T: Sendable>(
        configure: (inout FCMSimulatorConfiguration) -> Void = { _ in },
        _ body: (FCMSimulatorHarness) async throws -> T
    ) async throws -> T {
        let clock = SimulatorTestClock()
        var configuration = FCMSimulatorConfiguration()
        let certificateDirectory = NSTemporaryDirectory() + "pgpush-fcm-simulator-test-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: certificateDirectory) }
        configuration.certificateDirectory = certificateDirectory
        configuration.serviceAccounts = [
            FCMSimulatorServiceAccount(clientEmail: clientEmail, projectID: projectID,
                                       publicKey: fcmSimulatorTestKey.publicKey, privateKeyID: keyID),
            try FCMSimulatorServiceAccount(clientEmail: otherClientEmail, projectID: otherProjectID,
                                           pem: fcmSimulatorTestKey.publicKey.pemRepresentation),
        ]
        configuration.now = { clock.now }
        configuration.threadCount = 2
        configure(&configuration)
        let simulator = FCMSimulator(configuration: configuration, logger: Logger(label: "fcm-simulator-test"))
        let port = try await simulator.start()
        let tokenURI = try #require(simulator.tokenURI.flatMap(URL.init(string:)))
        let harness = FCMSimulatorHarness(
            simulator: simulator, port: port, clock: clock,
            account: try account(projectID: projectID, clientEmail: clientEmail, tokenURI: tokenURI),
            otherAccount: try account(projectID: otherProjectID, clientEmail: otherClientEmail, tokenURI: tokenURI))
        do {
            let result = try await body(harness)
            await simulator.shutdown()
            return result
        } catch {
            await simulator.shutdown()
            throw error
        }
    }

    static func account(projectID: String = projectID, clientEmail: String = clientEmail, keyID: String = keyID,
                        key: _RSA.Signing.PrivateKey = fcmSimulatorTestKey, tokenURI: URL) throws -> FCMServiceAccount {
        try FCMServiceAccount(projectID: projectID, privateKeyID: keyID, clientEmail: clientEmail, tokenURI: tokenURI,
                              privateKey: key)
    }

    func connect() async throws -> SimulatorRawClient {
        try await SimulatorRawClient.connect(port: port, caPath: simulator.caCertificatePath)
    }

    /// A signed assertion for `account` issued at the simulator's clock (or `issuedAt`).
    func assertion(for account: FCMServiceAccount? = nil, issuedAt: Date? = nil, lifetime: TimeInterval = 3600) throws -> String {
        try FCMAssertionSigner(account: account ?? self.account).sign(issuedAt: issuedAt ?? clock.now, lifetime: lifetime).jwt
    }

    /// POSTs a token request with `body` (default: the grant for `assertion`).
    func exchange(_ client: SimulatorRawClient, assertion: String? = nil, body: String? = nil,
                  contentType: String = "application/x-www-form-urlencoded") async throws -> SimulatorRawClient.Outcome {
        let form = try body ?? FCMAssertionSigner.tokenRequestBody(assertion: assertion ?? self.assertion())
        return try await client.request(path: "/token", headers: [("content-type", contentType)], body: form)
    }

    /// Exchanges a fresh assertion of `account` for an access token.
    func accessToken(_ client: SimulatorRawClient, account: FCMServiceAccount? = nil) async throws -> String {
        let outcome = try await exchange(client, assertion: assertion(for: account))
        let json = try #require(outcome.json, "\(outcome)")
        return try #require(json["access_token"] as? String, "\(outcome)")
    }

    /// POSTs `messages:send` for `project` with `body` as is.
    func send(_ client: SimulatorRawClient, body: String, accessToken: String?,
              projectID: String = FCMSimulatorHarness.projectID) async throws -> SimulatorRawClient.Outcome {
        var headers = [("content-type", "application/json")]
        if let accessToken { headers.append(("authorization", "Bearer \(accessToken)")) }
        return try await client.request(path: "/v1/projects/\(projectID)/messages:send", headers: headers, body: body)
    }

    /// `{"message":{"token":…,<fields>}}`, `fields` being JSON members without braces.
    static func body(token: String, fields: String = #""data":{"k":"v"}"#, validateOnly: Bool? = nil) -> String {
        let members = fields.isEmpty ? "" : "," + fields
        let flag = validateOnly.map { #""validate_only":\#($0),"# } ?? ""
        return #"{\#(flag)"message":{"token":"\#(token)"\#(members)}}"#
    }

    /// A token the registry treats as valid, distinct per `index`.
    static func token(_ index: Int, prefix: String = "fcm") -> String {
        "\(prefix)-token_\(index):APA91b" + String(repeating: "x", count: 40)
    }
}

extension SimulatorRawClient.Outcome {
    /// The response body as a JSON object.
    var json: [String: Any]? {
        guard case .response(_, _, let body) = self else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
    }

    /// The answer as pgpush's FCM transport reads it.
    var fcmResponse: FCMResponse? {
        guard case .response(let status, let headers, let body) = self else { return nil }
        return FCMResponse(status: status, body: Data(body.utf8), retryAfter: headers["retry-after"], now: Date())
    }

    /// `error.details[*]["@type"]`.
    var errorDetailTypes: [String] {
        ((json?["error"] as? [String: Any])?["details"] as? [[String: Any]] ?? []).compactMap { $0["@type"] as? String }
    }

    var headers: [String: String] { if case .response(_, let headers, _) = self { headers } else { [:] } }
}

@Suite("FCM simulator: lifecycle, summary and shared plumbing", .timeLimit(.minutes(1)), .network)
struct FCMSimulatorHarnessTests {
    @Test func differencesFitOnOneLine() {
        #expect(!FCMSimulator.differencesFromFCM.contains("\n"))
        #expect(FCMSimulator.differencesFromFCM.contains("token"))
    }

    @Test func summaryAndLedgerFileRecordAcceptedMessages() async throws {
        let file = NSTemporaryDirectory() + "pgpush-fcm-ledger-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: file) }
        try await FCMSimulatorHarness.with(configure: { $0.ledgerFile = file }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            for index in 0..<2 {
                let outcome = try await harness.send(client, body: FCMSimulatorHarness.body(token: FCMSimulatorHarness.token(index)),
                                                     accessToken: accessToken)
                #expect(outcome.status == 200)
            }
            _ = try await harness.send(client, body: FCMSimulatorHarness.body(token: "dead-1"), accessToken: accessToken)
            let summary = harness.simulator.summary
            #expect(summary.contains("accepted=2"), "\(summary)")
            #expect(summary.contains("tokenExchanges=1"), "\(summary)")
            #expect(summary.contains("404 UNREGISTERED=1"), "\(summary)")
        }
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2)
        let first = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect(first["token"] as? String == FCMSimulatorHarness.token(0))
        #expect(first["project"] as? String == FCMSimulatorHarness.projectID)
        #expect(((first["message"] as? [String: Any])?["data"] as? [String: String]) == ["k": "v"])
    }

    @Test func runServesUntilCancelled() async throws {
        var configuration = FCMSimulatorConfiguration()
        let directory = NSTemporaryDirectory() + "pgpush-fcm-simulator-run-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        configuration.certificateDirectory = directory
        configuration.threadCount = 1
        let simulator = FCMSimulator(configuration: configuration, logger: .init(label: "fcm-run-test"))
        let task = Task { try await simulator.run() }
        var port: Int?
        for _ in 0..<500 where port == nil {
            port = simulator.port
            try await Task.sleep(for: .milliseconds(10))
        }
        let boundPort = try #require(port)
        #expect(simulator.tokenURI == "https://127.0.0.1:\(boundPort)/token")
        let client = try await SimulatorRawClient.connect(port: boundPort, caPath: simulator.caCertificatePath)
        try await client.wait { !$0.maxConcurrentStreamsSettings.isEmpty }
        task.cancel()
        try await task.value
        #expect(simulator.port == nil)
        try await client.wait { $0.closed }
    }

    /// Both simulators stand on the same listener and certificates: one CA directory serves both.
    @Test func apnsAndFCMShareOneCertificateDirectory() async throws {
        let directory = NSTemporaryDirectory() + "pgpush-shared-ca-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var apnsConfiguration = APNsSimulatorConfiguration()
        apnsConfiguration.certificateDirectory = directory
        apnsConfiguration.threadCount = 1
        var fcmConfiguration = FCMSimulatorConfiguration()
        fcmConfiguration.certificateDirectory = directory
        fcmConfiguration.threadCount = 1
        let apns = APNsSimulator(configuration: apnsConfiguration, logger: .init(label: "apns"))
        let fcm = FCMSimulator(configuration: fcmConfiguration, logger: .init(label: "fcm"))
        let apnsPort = try await apns.start()
        let fcmPort = try await fcm.start()
        #expect(apns.caCertificatePath == fcm.caCertificatePath)
        let apnsClient = try await SimulatorRawClient.connect(port: apnsPort, caPath: apns.caCertificatePath)
        let fcmClient = try await SimulatorRawClient.connect(port: fcmPort, caPath: apns.caCertificatePath)
        try await apnsClient.wait { !$0.maxConcurrentStreamsSettings.isEmpty }
        try await fcmClient.wait { !$0.maxConcurrentStreamsSettings.isEmpty }
        // APNs allows one stream until the first success; FCM advertises its limit from the start.
        #expect(apnsClient.snapshot.maxConcurrentStreamsSettings.first == 1)
        #expect(fcmClient.snapshot.maxConcurrentStreamsSettings.first == 100)
        let notFound = try await fcmClient.request(path: "/3/device/abcd", headers: [], body: "{}")
        #expect(notFound.status == 404)
        await apnsClient.close()
        await fcmClient.close()
        await apns.shutdown()
        await fcm.shutdown()
        #expect(apns.statistics.connectionsAccepted == 1)
        #expect(fcm.statistics.connectionsAccepted == 1)
    }
}
