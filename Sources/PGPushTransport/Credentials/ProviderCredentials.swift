import PGPushCore

/// How a pool proves it may send: an APNs provider token (JWT) per request, an APNs TLS client certificate,
/// an OAuth 2.0 access token per request (FCM), or nothing (an OAuth token endpoint).
public enum ProviderCredentials: Sendable {
    /// APNs token authentication: every request carries `authorization: bearer <jwt>` from this source.
    case token(any ProviderTokenSource)
    /// APNs certificate authentication: the certificate is presented in the TLS handshake.
    case certificate(APNsClientCertificate)
    /// An OAuth 2.0 access token per request (FCM): `authorization: Bearer <token>` from this source. A 401
    /// is reported back to it, so the next request carries a fresh token.
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

    /// Whether APNs allows only one stream until the first request succeeds (token auth does).
    var startsWithSingleStream: Bool {
        if case .token = self { return true }
        return false
    }

    /// The reason to report to the token's source when `response` rejects the token the request carried,
    /// else `nil`. Each provider says which answers name the token (see `Providers/`).
    func tokenRejectionReason(_ response: ProviderResponse) -> String? {
        switch self {
        case .token: response.apnsProviderTokenRejection
        case .bearer: response.fcmAccessTokenRejection
        case .certificate, .none: nil
        }
    }
}
