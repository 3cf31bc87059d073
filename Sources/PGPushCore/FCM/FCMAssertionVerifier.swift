import Crypto
import CryptoExtras
import Foundation

/// Why an assertion was refused. At a token endpoint every case is OAuth's `invalid_grant`.
///
/// `description` is a fixed sentence: it never quotes the assertion or a claim.
public enum FCMAssertionRejection: Error, Sendable, Hashable, CustomStringConvertible {
    case notAJWT
    case malformedHeader
    case unsupportedAlgorithm
    case wrongKeyID
    case badSignature
    case malformedClaims
    case wrongIssuer
    case wrongAudience
    case wrongScope
    case issuedInTheFuture
    case expired
    /// `exp` is not after `iat`, or more than 3600 seconds after it.
    case invalidLifetime

    /// The OAuth 2.0 error code (RFC 6749 §5.2) a token endpoint answers with.
    public var oauthError: String { "invalid_grant" }

    public var description: String {
        switch self {
        case .notAJWT: "the assertion is not a JWT of three base64url parts"
        case .malformedHeader: "the JWT header is not a JSON object with an alg"
        case .unsupportedAlgorithm: "the JWT is not signed with RS256"
        case .wrongKeyID: "the JWT's kid is not the service account's key id"
        case .badSignature: "invalid JWT signature"
        case .malformedClaims: "the JWT claims are not a JSON object with iss, scope, aud, iat and exp"
        case .wrongIssuer: "the iss claim is not the service account's client email"
        case .wrongAudience: "the aud claim is not the token URI"
        case .wrongScope: "the scope claim does not include firebase.messaging"
        case .issuedInTheFuture: "the iat claim is in the future"
        case .expired: "the JWT has expired"
        case .invalidLifetime: "exp is not within 3600 seconds after iat"
        }
    }
}

/// What a verified assertion claimed.
public struct FCMVerifiedAssertion: Sendable, Hashable {
    public var issuedAt: Date
    public var expiresAt: Date
    public var keyID: String?
}

/// Checks JWT-bearer assertions the way Google's token endpoint does, for the FCM simulator.
public struct FCMAssertionVerifier: Sendable {
    public var clientEmail: String
    /// The expected `aud`, compared as text.
    public var tokenURI: String
    public var publicKey: _RSA.Signing.PublicKey
    /// When set, the header's `kid` must equal it.
    public var privateKeyID: String?
    /// How far `iat` may lie in the future, for clocks that disagree.
    public var allowedClockSkew: TimeInterval

    /// Assertions longer than this are refused unread; real ones are under 1 KB.
    static let maximumLength = 16 * 1024

    public init(
        clientEmail: String,
        tokenURI: String,
        publicKey: _RSA.Signing.PublicKey,
        privateKeyID: String? = nil,
        allowedClockSkew: TimeInterval = 60
    ) {
        self.clientEmail = clientEmail
        self.tokenURI = tokenURI
        self.publicKey = publicKey
        self.privateKeyID = privateKeyID
        self.allowedClockSkew = allowedClockSkew
    }

    /// A verifier for the assertions `account` signs.
    public init(account: FCMServiceAccount, allowedClockSkew: TimeInterval = 60) {
        self.init(
            clientEmail: account.clientEmail,
            tokenURI: account.tokenURI.absoluteString,
            publicKey: account.publicKey,
            privateKeyID: account.privateKeyID,
            allowedClockSkew: allowedClockSkew
        )
    }

    private struct Header: Decodable {
        var alg: String
        var kid: String?
    }

    private struct Claims: Decodable {
        var iss: String
        var scope: String
        var aud: String
        var iat: Int64
        var exp: Int64
    }

    /// Verifies `assertion` at `now`. The signature is checked before any claim, so a forged token learns
    /// nothing about which claims were right.
    public func verify(_ assertion: String, now: Date) throws(FCMAssertionRejection) -> FCMVerifiedAssertion {
        guard assertion.utf8.count <= Self.maximumLength else { throw .notAJWT }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerData = FCMBase64URL.decode(parts[0]),
              let claimsData = FCMBase64URL.decode(parts[1]),
              let signatureData = FCMBase64URL.decode(parts[2])
        else { throw .notAJWT }

        guard let header = try? JSONDecoder().decode(Header.self, from: headerData) else { throw .malformedHeader }
        // Only RS256: accepting the header's word for the algorithm is how `alg: none` forgeries work.
        guard header.alg == "RS256" else { throw .unsupportedAlgorithm }
        if let privateKeyID, header.kid != privateKeyID { throw .wrongKeyID }

        let signature = _RSA.Signing.RSASignature(rawRepresentation: signatureData)
        let signingInput = Data(assertion.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard publicKey.isValidSignature(signature, for: SHA256.hash(data: signingInput), padding: .insecurePKCS1v1_5)
        else { throw .badSignature }

        guard let claims = try? JSONDecoder().decode(Claims.self, from: claimsData) else { throw .malformedClaims }
        guard claims.iss == clientEmail else { throw .wrongIssuer }
        guard claims.aud == tokenURI else { throw .wrongAudience }
        // `scope` is a space-separated list (RFC 6749 §3.3); others may ride along.
        guard claims.scope.split(separator: " ").contains(Substring(FCMAssertionSigner.scope)) else { throw .wrongScope }

        let nowSeconds = now.timeIntervalSince1970
        guard TimeInterval(claims.iat) <= nowSeconds + allowedClockSkew else { throw .issuedInTheFuture }
        guard TimeInterval(claims.exp) > nowSeconds else { throw .expired }
        let (lifetime, overflow) = claims.exp.subtractingReportingOverflow(claims.iat)
        guard !overflow, lifetime > 0, lifetime <= Int64(FCMAssertionSigner.maximumLifetime) else { throw .invalidLifetime }

        return FCMVerifiedAssertion(
            issuedAt: Date(timeIntervalSince1970: TimeInterval(claims.iat)),
            expiresAt: Date(timeIntervalSince1970: TimeInterval(claims.exp)),
            keyID: header.kid
        )
    }
}
