import Crypto
import Foundation
import SwiftASN1
import X509

/// The simulator's own CA and its server certificate, as PEM files in one directory. The server certificate
/// names `localhost`, 127.0.0.1 and any extra host names clients reach the simulator by (a compose service
/// name, say), because clients verify it like any other.
public struct SimulatorCertificates: Sendable {
    public let directory: String
    /// Every DNS name the server certificate must carry.
    let hostnames: [String]
    public var caCertificatePath: String { directory + "/ca.pem" }
    var caKeyPath: String { directory + "/ca-key.pem" }
    public var serverCertificatePath: String { directory + "/server.pem" }
    public var serverKeyPath: String { directory + "/server-key.pem" }

    public init(directory: String, extraHostnames: [String] = []) {
        self.directory = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        var hostnames = ["localhost"]
        for name in extraHostnames.map({ $0.lowercased() }) where !hostnames.contains(name) { hostnames.append(name) }
        self.hostnames = hostnames
    }

    var allFilesExist: Bool {
        [caCertificatePath, caKeyPath, serverCertificatePath, serverKeyPath]
            .allSatisfy { FileManager.default.fileExists(atPath: $0) }
    }

    /// Writes a new CA and server certificate unless all four files already exist and the server certificate
    /// names every host name (or `force` is set).
    public func ensureExist(force: Bool, now: Date = Date()) throws {
        if !force && allFilesExist && (try? serverCertificateNames().isSuperset(of: hostnames)) == true { return }
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
                SubjectAlternativeNames(
                    hostnames.map { GeneralName.dnsName($0) } + [.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
            },
            issuerPrivateKey: .init(caKey)
        )

        try write(ca.serializeAsPEM().pemString, to: caCertificatePath, secret: false)
        try write(caKey.pemRepresentation, to: caKeyPath, secret: true)
        try write(server.serializeAsPEM().pemString, to: serverCertificatePath, secret: false)
        try write(serverKey.pemRepresentation, to: serverKeyPath, secret: true)
    }

    /// The DNS names in the existing server certificate's subject alternative names.
    func serverCertificateNames() throws -> Set<String> {
        let certificate = try Certificate(pemEncoded: String(contentsOfFile: serverCertificatePath, encoding: .utf8))
        var names = Set<String>()
        for name in try certificate.extensions.subjectAlternativeNames ?? SubjectAlternativeNames() {
            if case .dnsName(let dnsName) = name { names.insert(dnsName.lowercased()) }
        }
        return names
    }

    private func write(_ text: String, to path: String, secret: Bool) throws {
        try Data((text + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        if secret { try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path) }
    }
}
