import Foundation
import PGPushSimulator
import Testing

@Suite("APNs simulator: certificate authentication", .network)
struct SimulatorCertificateAuthTests {
    /// Makes a CA and a client certificate it signed, with the openssl CLI.
    private static func makeClientCertificate(in directory: String, name: String) throws -> (ca: String, certificate: String, key: String) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let ca = "\(directory)/\(name)-ca.pem", caKey = "\(directory)/\(name)-ca-key.pem"
        let key = "\(directory)/\(name)-key.pem", csr = "\(directory)/\(name).csr", cert = "\(directory)/\(name).pem"
        try run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", caKey, "-out", ca, "-days", "2", "-subj", "/CN=\(name) test CA"])
        try run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", "/CN=Apple Push Services: com.example.app"])
        try run(["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", caKey, "-CAcreateserial", "-out", cert, "-days", "2"])
        return (ca, cert, key)
    }

    private static func run(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw OpenSSLFailed(arguments: arguments) }
    }

    struct OpenSSLFailed: Error { var arguments: [String] }

    @Test(.timeLimit(.minutes(1)))
    func clientCertificateFromTrustedCAIsAccepted() async throws {
        let directory = NSTemporaryDirectory() + "pgpush-simulator-certauth-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let trusted = try Self.makeClientCertificate(in: directory, name: "trusted")
        let stranger = try Self.makeClientCertificate(in: directory, name: "stranger")

        try await SimulatorHarness.with(configure: {
            $0.clientCertificateCAFile = trusted.ca
            $0.certificateTopics = ["com.example.app"]
        }) { harness in
            let path = "/3/device/" + SimulatorHarness.token(31)
            let client = try await harness.connect(clientCertificate: (trusted.certificate, trusted.key))
            let accepted = try await client.request(path: path, headers: [("apns-push-type", "alert")],
                                                    body: SimulatorHarness.payload)
            #expect(accepted.status == 200)
            #expect(client.snapshot.maxConcurrentStreamsSettings.first == 1000)
            let otherTopic = try await client.request(
                path: path, headers: [("apns-topic", "com.example.other")], body: SimulatorHarness.payload)
            #expect(otherTopic.reason == "TopicDisallowed")
            #expect(harness.simulator.ledger.entries.first?.topic == "com.example.app")
            await client.close()

            // Signed by another CA: the handshake fails, nothing is answered.
            var refused = false
            do {
                let rogue = try await harness.connect(clientCertificate: (stranger.certificate, stranger.key))
                refused = try await rogue.request(path: path, headers: [("apns-push-type", "alert")],
                                                  body: SimulatorHarness.payload) == .connectionClosed
                await rogue.close()
            } catch {
                refused = true
            }
            #expect(refused)

            // Without a certificate the connection falls back to provider tokens.
            let tokenClient = try await harness.connect()
            #expect(try await tokenClient.request(path: path, headers: [("apns-topic", "com.example.app")],
                                                  body: SimulatorHarness.payload).reason == "MissingProviderToken")
            await tokenClient.close()
            #expect(harness.simulator.ledger.acceptedCount == 1)
        }
    }
}
