import Crypto
import CryptoExtras
import Foundation

/// A signed OAuth 2.0 JWT-bearer assertion (RFC 7523) for one service account, to be exchanged at the
/// token URI for an FCM access token.
///
/// `description` never shows the JWT: for its lifetime it can be exchanged for access tokens.
public struct FCMAssertion: Sendable, Hashable, CustomStringConvertible {
    public let jwt: String
    /// The `iat` claim, whole seconds.
    public let issuedAt: Date
    /// The `exp` claim, whole seconds.
    public let expiresAt: Date

    public init(jwt: String, issuedAt: Date, expiresAt: Date) {
        self.jwt = jwt
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }

    /// The `application/x-www-form-urlencoded` body that exchanges this assertion for an access token.
    public var tokenRequestBody: String { FCMAssertionSigner.tokenRequestBody(assertion: jwt) }

    public var description: String {
        "FCMAssertion(iat: \(Int64(issuedAt.timeIntervalSince1970)), exp: \(Int64(expiresAt.timeIntervalSince1970)))"
    }
}

/// Signs assertions: `{"alg":"RS256","typ":"JWT","kid":…}` . `{"iss","scope","aud","iat","exp"}` .
/// RSASSA-PKCS1-v1_5 over SHA-256, each part base64url without padding.
public struct FCMAssertionSigner: Sendable {
    /// The OAuth scope that allows sending FCM messages.
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// Google refuses assertions that live longer than an hour.
    public static let maximumLifetime: TimeInterval = 3600
    /// The `grant_type` of RFC 7523.
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    public static let tokenRequestContentType = "application/x-www-form-urlencoded"

    public let account: FCMServiceAccount

    public init(account: FCMServiceAccount) {
        self.account = account
    }

    /// Signs an assertion whose `iat` is `issuedAt` truncated to whole seconds.
    ///
    /// - Parameter lifetime: Seconds until `exp`, truncated to whole seconds and clamped to 1…3600.
    public func sign(issuedAt: Date, lifetime: TimeInterval = FCMAssertionSigner.maximumLifetime) throws(PGPushError) -> FCMAssertion {
        let iat = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        let seconds = lifetime.isNaN ? Self.maximumLifetime : min(max(lifetime.rounded(.down), 1), Self.maximumLifetime)
        let exp = iat + Int64(seconds)

        // Written by hand rather than with JSONSerialization: fixed key order, and no `\/` in the URLs.
        let header = #"{"alg":"RS256","typ":"JWT","kid":"# + FCMJSONText.quoted(account.privateKeyID) + "}"
        let claims = #"{"iss":"# + FCMJSONText.quoted(account.clientEmail)
            + #","scope":"# + FCMJSONText.quoted(Self.scope)
            + #","aud":"# + FCMJSONText.quoted(account.tokenURI.absoluteString)
            + #","iat":\#(iat),"exp":\#(exp)}"#
        let signingInput = FCMBase64URL.encode(Data(header.utf8)) + "." + FCMBase64URL.encode(Data(claims.utf8))

        let signature: _RSA.Signing.RSASignature
        do {
            signature = try account.privateKey.signature(
                for: SHA256.hash(data: Data(signingInput.utf8)),
                padding: .insecurePKCS1v1_5
            )
        } catch {
            throw PGPushError(
                .internal,
                "signing the FCM assertion for \(account.clientEmail) failed",
                underlying: error
            )
        }
        return FCMAssertion(
            jwt: signingInput + "." + FCMBase64URL.encode(signature.rawRepresentation),
            issuedAt: Date(timeIntervalSince1970: TimeInterval(iat)),
            expiresAt: Date(timeIntervalSince1970: TimeInterval(exp))
        )
    }

    /// `grant_type=…&assertion=…`, both values form-encoded.
    public static func tokenRequestBody(assertion: String) -> String {
        "grant_type=" + formEncoded(grantType) + "&assertion=" + formEncoded(assertion)
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters. A JWT is unreserved throughout,
    /// the grant type's colons are not.
    static func formEncoded(_ value: String) -> String {
        var output = ""
        output.reserveCapacity(value.utf8.count)
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return output
    }
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}
