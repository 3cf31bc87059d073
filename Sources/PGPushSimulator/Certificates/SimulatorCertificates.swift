import Crypto
import Foundation
import SwiftASN1
import X509

/// The simulator's own CA and its `localhost` server certificate, as PEM files in one directory.
struct SimulatorCertificates: Sendable {
    let directory: String
    var caCertificatePath: String { directory + "/ca.pem" }
    var caKeyPath: String { directory + "/ca-key.pem" }
    var serverCertificatePath: String { directory + "/server.pem" }
    var serverKeyPath: String { directory + "/server-key.pem" }

    init(directory: String) {
        self.directory = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
    }

    var allFilesExist: Bool {
        [caCertificatePath, caKeyPath, serverCertificatePath, serverKeyPath]
            .allSatisfy { FileManager.default.fileExists(atPath: $0) }
    }

    /// Writes a new CA and server certificate unless all four files already exist (or `force` is set).
    func ensureExist(force: Bool, now: Date = Date()) throws {
        if !force && allFilesExist { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)

        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName {
            OrganizationName("pgpush")
            CommonName("pgpush APNs simulator CA")
        }
        let ca = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: .init(caKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(10 * 365 * 86_400),
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(caKey)
        )

        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: .init(serverKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(2 * 365 * 86_400),
            issuer: caName,
            subject: try DistinguishedName {
                OrganizationName("pgpush")
                CommonName("localhost")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
            },
            issuerPrivateKey: .init(caKey)
        )

        try write(ca.serializeAsPEM().pemString, to: caCertificatePath, secret: false)
        try write(caKey.pemRepresentation, to: caKeyPath, secret: true)
        try write(server.serializeAsPEM().pemString, to: serverCertificatePath, secret: false)
        try write(serverKey.pemRepresentation, to: serverKeyPath, secret: true)
    }

    private func write(_ text: String, to path: String, secret: Bool) throws {
        try Data((text + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        if secret { try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path) }
    }
}
