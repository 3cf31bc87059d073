import PGPushCore

/// How a pool proves it may send: a signed provider token per request, a TLS client certificate, an OAuth 2.0
/// access token per request, or nothing (an OAuth token endpoint). Which provider uses which, and which
/// answers reject a token, is the provider's rules' to say (``HTTP2ProviderRules``).
public enum ProviderCredentials: Sendable {
    /// Token authentication: every request carries `authorization: bearer <jwt>` from this source.
    case token(any ProviderTokenSource)
    /// Certificate authentication: the certificate is presented in the TLS handshake.
    case certificate(TLSClientCertificate)
    /// An OAuth 2.0 access token per request: `authorization: Bearer <token>` from this source. An answer
    /// that rejects it is reported back to it, so the next request carries a fresh token.
    case bearer(any ProviderTokenSource)
    /// No credential: the request itself authenticates (an OAuth token endpoint, with its signed assertion).
    case none

    /// The source of per-request tokens, if this credential has one.
    var tokenSource: (any ProviderTokenSource)? {
        switch self {
        case .token(let source), .bearer(let source): source
        case .certificate, .none: nil
        }
    }
}
