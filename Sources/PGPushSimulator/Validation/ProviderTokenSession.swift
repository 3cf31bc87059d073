import Foundation

/// The provider-token state of one connection, on either port: the key the connection is bound to (APNs
/// refuses a token of another key on the same connection) and the last token accepted, so a reused token
/// costs no signature check. Confined to the connection's event loop, like its owner.
struct ProviderTokenSession {
    private var boundKeyID: String?
    private var lastProviderToken: String?
    private var lastProviderTokenIssuedAt: Int64 = 0

    /// The token of an `authorization: bearer <jwt>` header (the scheme in any case); `nil` for another scheme.
    static func bearerToken(_ authorization: String?) -> String? {
        guard let authorization, authorization.prefix(7).lowercased() == "bearer " else { return nil }
        return String(authorization.dropFirst(7))
    }

    /// `nil` when the request's token is acceptable; APNs' 403 (or 429) otherwise.
    mutating func authenticate(bearerToken jwt: String?, hasAuthorizationHeader: Bool,
                               authority: ProviderTokenAuthority, now: Date) -> SimulatorRejection? {
        guard let jwt else {
            return .init(status: 403, reason: hasAuthorizationHeader ? "InvalidProviderToken" : "MissingProviderToken")
        }
        if jwt == lastProviderToken {
            // Same token as the previous request on this connection: only its age can have changed.
            if authority.isExpired(issuedAt: lastProviderTokenIssuedAt, now: now) {
                return .init(status: 403, reason: "ExpiredProviderToken")
            }
            return nil
        }
        switch authority.authenticate(jwt: jwt, boundKeyID: boundKeyID, now: now) {
        case .accepted(let keyID, let issuedAt):
            boundKeyID = keyID
            lastProviderToken = jwt
            lastProviderTokenIssuedAt = issuedAt
            return nil
        case .rejected(let status, let reason):
            return .init(status: status, reason: reason)
        }
    }
}
