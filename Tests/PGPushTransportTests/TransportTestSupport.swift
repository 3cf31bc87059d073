import Crypto
import Foundation
import Logging
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Testing

/// A token-auth identity the simulator trusts.
struct TransportTestKey {
    let teamID = "TEAM123456"
    let keyID = "KEY1234567"
    let privateKey = P256.Signing.PrivateKey()

    var simulatorKey: SimulatorTokenKey {
        SimulatorTokenKey(teamID: teamID, keyID: keyID, publicKey: privateKey.publicKey)
    }

    func signer() throws -> ProviderTokenSigner {
        try ProviderTokenSigner(teamID: teamID, keyID: keyID, privateKeyPEM: privateKey.pemRepresentation)
    }

    func tokenSource(clock: any WallClock = SystemWallClock()) throws -> LocalProviderTokenSource {
        LocalProviderTokenSource(signer: try signer(), clock: clock)
    }
}

enum TransportTest {
    static let topic = "com.example.pgpush"

    static var logger: Logger {
        var logger = Logger(label: "pgpush.apns.tests")
        logger.logLevel = .error
        return logger
    }

    /// A simulator with its own certificate directory, so parallel tests never race on the files.
    static func simulatorConfiguration(key: TransportTestKey?) -> APNsSimulatorConfiguration {
        var configuration = APNsSimulatorConfiguration()
        configuration.certificateDirectory = NSTemporaryDirectory() + "pgpush-apns-tests-\(UUID().uuidString)"
        configuration.threadCount = 1
        if let key { configuration.tokenKeys = [key.simulatorKey] }
        return configuration
    }

    /// The HTTP/2 engines every suite over TLS runs each of its cases on (`arguments: TransportTest.engines`): both,
    /// unless `PGPUSH_TEST_HTTP2_ENGINES` names some (`nio`, `nghttp2`, comma-separated), to time or debug one.
    static let engines: [HTTP2Engine] = {
        guard let names = ProcessInfo.processInfo.environment["PGPUSH_TEST_HTTP2_ENGINES"], !names.isEmpty else { return HTTP2Engine.allCases }
        return names.split(separator: ",").compactMap { HTTP2Engine(rawValue: $0.trimmingCharacters(in: .whitespaces)) }
    }()

    /// - Parameter engine: the engine of this case (see ``engines``).
    static func clientConfiguration(port: Int, caFile: String, connections: Int = 1, engine: HTTP2Engine) -> HTTP2ClientConfiguration {
        var configuration = HTTP2ClientConfiguration(endpoint: .custom(host: "127.0.0.1", port: port))
        configuration.http2Engine = engine
        configuration.additionalTrustRootsPEMFile = caFile
        configuration.connectionsPerPool = connections
        // Tests about limits and faults must not see deadline expiries from a loaded machine; the deadline test
        // sets its own short timeout.
        configuration.requestTimeout = .seconds(60)
        // Generous: debug-build TLS handshakes on a loaded 2-core machine can take seconds.
        configuration.connectTimeout = .seconds(20)
        configuration.reconnectBackoff = ReconnectBackoff(minimum: .milliseconds(20), maximum: .milliseconds(200))
        return configuration
    }

    /// A random 64-hex token that is valid for the simulator: it starts with "f", so it never matches the
    /// registry's prefix rules (`dead`, `bad0`, `0e0e`).
    static func randomToken() -> String {
        "f" + String((0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined().dropFirst())
    }

    static func request(token: String) -> APNsRequest {
        APNsRequest(
            deviceToken: token,
            topic: topic,
            apnsID: UUID(),
            payload: Array(#"{"aps":{"alert":"hello"}}"#.utf8)
        )
    }

    /// Runs `body` with a started simulator and a running pool, then stops both.
    static func withPool<T: Sendable>(
        simulator simulatorConfiguration: APNsSimulatorConfiguration,
        client: (Int, String) -> HTTP2ClientConfiguration,
        credentials: ProviderCredentials,
        _ body: @Sendable (HTTP2ConnectionPool, APNsSimulator) async throws -> T
    ) async throws -> T {
        let simulator = APNsSimulator(configuration: simulatorConfiguration, logger: logger)
        let port = try await simulator.start()
        do {
            let pool = try HTTP2ConnectionPool(
                configuration: client(port, simulator.caCertificatePath),
                credentials: credentials,
                logger: logger
            )
            let result = try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask {
                    try await pool.run()
                    return nil
                }
                let result = try await body(pool, simulator)
                group.cancelAll()
                while let next = try await group.next() { _ = next }
                return result
            }
            await simulator.shutdown()
            return result
        } catch {
            await simulator.shutdown()
            throw error
        }
    }

    /// Sends one request per token with at most `concurrency` in flight and re-sends every `.noResponse`
    /// until a response arrives (bounded attempts, growing pauses so a reconnect has time to finish).
    /// Returns per-token histories.
    static func sendAllUntilAnswered(
        pool: HTTP2ConnectionPool,
        tokens: [String],
        concurrency: Int,
        maximumAttempts: Int = 40
    ) async -> [String: [ProviderOutcome]] {
        await withTaskGroup(of: (String, [ProviderOutcome]).self) { group in
            var results: [String: [ProviderOutcome]] = [:]
            var iterator = tokens.makeIterator()
            func addNext() -> Bool {
                guard let token = iterator.next() else { return false }
                group.addTask {
                    var history: [ProviderOutcome] = []
                    let request = TransportTest.request(token: token)
                    for attempt in 0..<maximumAttempts {
                        let outcome = await pool.send(request)
                        history.append(outcome)
                        if case .response = outcome { break }
                        try? await Task.sleep(for: .milliseconds(10 * min(attempt + 1, 50)))
                    }
                    return (token, history)
                }
                return true
            }
            for _ in 0..<concurrency where addNext() {}
            while let (token, history) = await group.next() {
                results[token] = history
                _ = addNext()
            }
            return results
        }
    }
}

extension ProviderNoResponseReason {
    /// Whether the transport says APNs did not process the request.
    var meansNotProcessed: Bool {
        switch self {
        case .goAwayNotProcessed, .refusedStream, .connectFailed, .tlsRejected, .credentialRefused, .notSent: true
        case .connectionClosed, .missingStatus, .timeout: false
        }
    }
}
