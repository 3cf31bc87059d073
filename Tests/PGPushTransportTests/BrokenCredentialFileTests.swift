import Foundation
import PGPushTransport
import PGPushCore
import Testing

/// Certificate credentials that are truncated, empty, binary, oversized or of the wrong kind: each loader
/// refuses them with an error that names the file, never its contents or the passphrase.
@Suite struct BrokenCredentialFileTests {
    @Test(.timeLimit(.minutes(1)))
    func fiveHundredBrokenCertificateFilesAreRefusedWithoutTheirContents() throws {
        let directory = NSTemporaryDirectory() + "pgpush-broken-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var random = SystemRandomNumberGenerator()
        for round in 0..<500 {
            let secret = "S3CRET\(round)X"
            let passphrase = "Pass-\(round)-phrase"
            let body = Data((secret + String(repeating: "k", count: Int.random(in: 0...300, using: &random))).utf8).base64EncodedString()
            let contents: Data
            switch round % 6 {
            case 0: contents = Data()
            case 1: contents = Data("-----BEGIN CERTIFICATE-----\n\(body)\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\n\(body)\n".utf8)
            case 2: contents = Data((0..<Int.random(in: 1...4096, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }) + Data(secret.utf8)
            case 3: contents = Data(("-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + String(repeating: body + "\n", count: 500) + "-----END ENCRYPTED PRIVATE KEY-----\n").utf8)
            case 4: contents = Data("\(secret)\n-----BEGIN CERTIFICATE-----\n".utf8)
            default: contents = Data("-----BEGIN RSA PRIVATE KEY-----\n\(body)\n-----END RSA PRIVATE KEY-----\n".utf8)
            }
            let path = directory + "/credential-\(round)" + (round % 2 == 0 ? ".pem" : ".p12")
            try contents.write(to: URL(fileURLWithPath: path))
            for load in [
                { try APNsClientCertificate(pemFile: path, passphrase: passphrase) },
                { try APNsClientCertificate(pkcs12File: path, passphrase: passphrase) },
            ] as [() throws -> APNsClientCertificate] {
                do {
                    _ = try load()
                    Issue.record("a broken file loaded: round \(round)")
                } catch let error as PGPushError {
                    #expect(error.code == .invalidCredential, "\(error)")
                    #expect(!error.description.contains(secret) && !error.description.contains(passphrase), "\(error)")
                    #expect(error.description.contains(path), "the error names the file: \(error)")
                }
            }
        }
    }
}
