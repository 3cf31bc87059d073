import PGPushCore

/// How the pool proves it may send for an app: a provider token (JWT) per request, or a TLS client certificate.
public enum APNsCredentials: Sendable {
    /// Token authentication: every request carries `authorization: bearer <jwt>` from this source.
    case token(any ProviderTokenSource)
    /// Certificate authentication: the certificate is presented in the TLS handshake.
    case certificate(APNsClientCertificate)

    /// Whether APNs allows only one stream until the first request succeeds (token auth does).
    var startsWithSingleStream: Bool {
        if case .token = self { return true }
        return false
    }
}
