import Foundation
import Testing

@testable import PGPushSimulator

/// The simulator's generated certificates: which names the server certificate carries, and when existing files
/// are kept or replaced.
@Suite("APNs simulator: certificate files", .network)
struct SimulatorCertificateFileTests {
    @Test func extraHostnamesAreCertifiedAndAMissingOneRegeneratesTheFiles() throws {
        let directory = NSTemporaryDirectory() + "pgpush-sim-certs-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }

        let compose = SimulatorCertificates(directory: directory, extraHostnames: ["Simulator", "localhost"])
        try compose.ensureExist(force: false)
        #expect(try compose.serverCertificateNames() == ["localhost", "simulator"])
        let firstCA = try String(contentsOfFile: compose.caCertificatePath, encoding: .utf8)

        // Names already covered: the files, and so the CA clients trust, stay as they are.
        try SimulatorCertificates(directory: directory).ensureExist(force: false)
        try SimulatorCertificates(directory: directory, extraHostnames: ["simulator"]).ensureExist(force: false)
        #expect(try String(contentsOfFile: compose.caCertificatePath, encoding: .utf8) == firstCA)

        // A name the certificate lacks: new files that carry it.
        let relay = SimulatorCertificates(directory: directory, extraHostnames: ["apns-relay"])
        try relay.ensureExist(force: false)
        #expect(try relay.serverCertificateNames() == ["localhost", "apns-relay"])
        #expect(try String(contentsOfFile: relay.caCertificatePath, encoding: .utf8) != firstCA)
    }
}
