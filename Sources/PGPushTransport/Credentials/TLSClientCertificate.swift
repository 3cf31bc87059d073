import Foundation
import NIOSSL
import PGPushCore

/// A TLS client certificate and its private key, loaded from PEM or PKCS#12.
///
/// Loading errors are ``PGPushError``s with code `.credentialUnreadable` (the file cannot be read) or
/// `.invalidCredential` (the bytes are not a usable certificate or key). Their messages name the file path
/// only, never its contents or the passphrase.
public struct TLSClientCertificate: Sendable {
    /// The leaf certificate first, then any intermediates.
    public let certificateChain: [NIOSSLCertificate]
    public let privateKey: NIOSSLPrivateKey

    /// When the leaf certificate stops being valid. A server refuses an expired certificate in the handshake.
    public var expiresAt: Date {
        Date(timeIntervalSince1970: TimeInterval(certificateChain[0].notValidAfter))
    }

    public init(certificateChain: [NIOSSLCertificate], privateKey: NIOSSLPrivateKey) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
    }

    /// Loads a PEM file holding both the certificate chain and the private key.
    public init(pemFile path: String, passphrase: String? = nil) throws {
        try self.init(certificatePEMFile: path, keyPEMFile: path, passphrase: passphrase)
    }

    /// Loads the certificate chain and the private key from two PEM files (or one, passed twice).
    public init(certificatePEMFile: String, keyPEMFile: String, passphrase: String? = nil) throws {
        let certificateBytes = try Self.readFile(certificatePEMFile, what: "certificate")
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(certificateBytes)
        } catch {
            throw PGPushError(.invalidCredential, "no PEM certificate could be parsed from \(certificatePEMFile)", underlying: error)
        }
        guard !chain.isEmpty else {
            throw PGPushError(.invalidCredential, "no PEM certificate found in \(certificatePEMFile)")
        }
        let keyBytes = keyPEMFile == certificatePEMFile ? certificateBytes : try Self.readFile(keyPEMFile, what: "private key")
        let key: NIOSSLPrivateKey
        do {
            // Always give a passphrase callback: without one BoringSSL would prompt on stdin for an encrypted key.
            let passphraseBytes = Array((passphrase ?? "").utf8)
            key = try NIOSSLPrivateKey(bytes: keyBytes, format: .pem) { (setter: NIOSSLPassphraseSetter<[UInt8]>) in
                setter(passphraseBytes)
            }
        } catch {
            throw PGPushError(
                .invalidCredential,
                "no usable PEM private key in \(keyPEMFile) (missing, malformed, or wrong passphrase)"
            )
        }
        self.init(certificateChain: chain, privateKey: key)
    }

    /// Loads a PKCS#12 (`.p12`) bundle protected by `passphrase`.
    public init(pkcs12File path: String, passphrase: String?) throws {
        let bytes = try Self.readFile(path, what: "PKCS#12 bundle")
        let bundle: NIOSSLPKCS12Bundle
        do {
            bundle = try NIOSSLPKCS12Bundle(buffer: bytes, passphrase: passphrase.map { Array($0.utf8) })
        } catch {
            // The underlying error is dropped on purpose: it is never useful and must not echo the passphrase.
            throw PGPushError(.invalidCredential, "\(path) is not a PKCS#12 bundle this passphrase opens")
        }
        guard !bundle.certificateChain.isEmpty else {
            throw PGPushError(.invalidCredential, "PKCS#12 bundle \(path) holds no certificate")
        }
        self.init(certificateChain: bundle.certificateChain, privateKey: bundle.privateKey)
    }

    /// Picks the loader from the file name: `.p12`/`.pfx` is PKCS#12, anything else PEM with certificate and key.
    public init(file path: String, passphrase: String? = nil) throws {
        let lower = path.lowercased()
        if lower.hasSuffix(".p12") || lower.hasSuffix(".pfx") {
            try self.init(pkcs12File: path, passphrase: passphrase)
        } else {
            try self.init(pemFile: path, passphrase: passphrase)
        }
    }

    private static func readFile(_ path: String, what: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PGPushError(.credentialUnreadable, "cannot read \(what) file \(path)")
        }
        return Array(data)
    }
}
