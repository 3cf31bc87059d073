import NIOSSL
import PGPushCore

/// Builds the one `NIOSSLContext` a pool shares across its connections.
enum HTTP2TLSContext {
    static func make(configuration: HTTP2ClientConfiguration, credentials: ProviderCredentials) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        tls.certificateVerification = .fullVerification
        if let path = configuration.additionalTrustRootsPEMFile {
            let roots: [NIOSSLCertificate]
            do {
                roots = try NIOSSLCertificate.fromPEMFile(path)
            } catch {
                throw PGPushError(.invalidConfiguration, "cannot load trust roots from \(path)", underlying: error)
            }
            tls.additionalTrustRoots = [.certificates(roots)]
        }
        if case .certificate(let certificate) = credentials {
            tls.certificateChain = certificate.certificateChain.map { .certificate($0) }
            tls.privateKey = .privateKey(certificate.privateKey)
        }
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw PGPushError(.invalidCredential, "TLS setup failed (certificate and key may not match)", underlying: error)
        }
    }
}
