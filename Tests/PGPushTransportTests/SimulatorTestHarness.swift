import Crypto
import Foundation
import Logging
import PGPushSimulator
import Synchronization

/// A wall clock tests can move forward.
final class SimulatorTestClock: Sendable {
    private let current = Mutex(Date())
    var now: Date { current.withLock { $0 } }
    func advance(by seconds: TimeInterval) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// A started simulator with one trusted provider-token key, plus helpers for requests against it.
struct SimulatorHarness: Sendable {
    static let topic = "com.example.app"
    static let payload = #"{"aps":{"alert":"hello"}}"#

    let simulator: APNsSimulator
    let port: Int
    let signer: SimulatorTestSigner
    let clock: SimulatorTestClock
    /// The provider token every request uses unless a test passes another: APNs wants one token reused.
    let jwt: String

    /// Starts a simulator, runs `body`, and always shuts it down.
    static func with<T: Sendable>(
        configure: (inout APNsSimulatorConfiguration) -> Void = { _ in },
        _ body: (SimulatorHarness) async throws -> T
    ) async throws -> T {
        let signer = SimulatorTestSigner()
        let clock = SimulatorTestClock()
        var configuration = APNsSimulatorConfiguration()
        let certificateDirectory = NSTemporaryDirectory() + "pgpush-simulator-test-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: certificateDirectory) }
        configuration.certificateDirectory = certificateDirectory
        configuration.tokenKeys = [SimulatorTokenKey(teamID: signer.teamID, keyID: signer.keyID, publicKey: signer.key.publicKey)]
        configuration.now = { clock.now }
        configuration.threadCount = 2
        configure(&configuration)
        let simulator = APNsSimulator(configuration: configuration, logger: Logger(label: "simulator-test"))
        let port = try await simulator.start()
        let harness = SimulatorHarness(simulator: simulator, port: port, signer: signer, clock: clock,
                                       jwt: try signer.token(issuedAt: clock.now))
        do {
            let result = try await body(harness)
            await simulator.shutdown()
            return result
        } catch {
            await simulator.shutdown()
            throw error
        }
    }

    func connect(clientCertificate: (certificate: String, key: String)? = nil) async throws -> SimulatorRawClient {
        try await SimulatorRawClient.connect(port: port, caPath: simulator.caCertificatePath,
                                             clientCertificate: clientCertificate)
    }

    /// A valid 64-hex-character token, distinct per `index`.
    static func token(_ index: Int, prefix: String = "a1") -> String {
        let hex = String(format: "%016llx", UInt64(index))
        return (prefix + String(repeating: "0", count: 64)).prefix(64 - hex.count) + hex
    }

    /// Headers of a valid token-auth alert request.
    func headers(jwt: String? = nil, topic: String = SimulatorHarness.topic,
                 extra: [(String, String)] = []) -> [(String, String)] {
        let bearer = jwt ?? self.jwt
        return [("authorization", "bearer \(bearer)"), ("apns-topic", topic), ("apns-push-type", "alert")] + extra
    }
}
