import struct Foundation.Date
import struct Foundation.TimeInterval

/// A signed APNs provider token (JWT ES256) for one (team id, key id).
///
/// `description` never shows the JWT: it is a bearer credential.
public struct ProviderToken: Sendable, Hashable, CustomStringConvertible {
    /// The compact JWT sent as `authorization: bearer <jwt>`.
    public let jwt: String
    /// The `iat` claim. Whole seconds, because that is what APNs sees.
    public let issuedAt: Date
    public let teamID: String
    public let keyID: String
    /// `bearer <jwt>`, built once rather than once per request.
    public let authorizationHeaderValue: String
    /// When the token stops being accepted, for tokens that say so (an OAuth 2.0 access token's
    /// `expires_in`); APNs provider tokens carry none and age out by ``ProviderTokenRefreshPolicy``.
    public let expiresAt: Date?

    /// Wraps an existing JWT, e.g. one shared by another worker through the database.
    ///
    /// - Parameters:
    ///   - authorizationScheme: `bearer` for APNs; `Bearer` for an OAuth 2.0 access token (FCM).
    ///   - expiresAt: The end of the token's lifetime, when it has one.
    public init(jwt: String, issuedAt: Date, teamID: String, keyID: String, authorizationScheme: String = "bearer",
                expiresAt: Date? = nil) {
        self.jwt = jwt
        self.issuedAt = issuedAt
        self.teamID = teamID
        self.keyID = keyID
        self.authorizationHeaderValue = "\(authorizationScheme) \(jwt)"
        self.expiresAt = expiresAt
    }

    /// How old the token is at `now`, in seconds. Negative if `now` is before `issuedAt`.
    public func age(at now: Date) -> TimeInterval {
        now.timeIntervalSince(issuedAt)
    }

    public var description: String {
        "ProviderToken(team: \(teamID), key: \(keyID), iat: \(Int64(issuedAt.timeIntervalSince1970)))"
    }
}
