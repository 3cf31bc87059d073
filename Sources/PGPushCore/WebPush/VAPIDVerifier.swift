import Crypto
import Foundation

/// The push service's side of VAPID: reads an `Authorization: vapid t=…, k=…` header and checks its token, as a
/// push service would. For the simulator and tests; the sender never needs it.
public enum VAPIDVerifier {
    /// What a valid token says.
    public struct Claims: Sendable, Hashable {
        /// `aud`, as written in the token.
        public var audience: String
        /// `exp`.
        public var expiresAt: Date
        /// `sub`, when present.
        public var subject: String?
        /// `k=`: the public key that verified the signature, base64url.
        public var applicationServerKey: String
    }

    /// Checks the header's form (scheme `vapid`, parameters `t` and `k`), the JWT's header (`alg` `ES256`), the
    /// ES256 signature against `k`, and that `exp` is after `now` and at most 24 hours after it.
    ///
    /// - Throws: ``WebPushError/Code/invalidVAPIDToken`` (or ``WebPushError/Code/invalidVAPIDKey`` for `k`), with a
    ///   message that never quotes the token.
    public static func verify(authorization: String, now: Date) throws(WebPushError) -> Claims {
        func invalid(_ reason: String) -> WebPushError {
            WebPushError(.invalidVAPIDToken, field: "authorization", "the VAPID authorization \(reason)")
        }
        let trimmed = authorization.drop { $0 == " " }
        guard let space = trimmed.firstIndex(of: " "), trimmed[..<space].lowercased() == "vapid" else {
            throw invalid("does not use the vapid scheme")
        }
        var token: Substring?
        var key: Substring?
        for parameter in trimmed[space...].split(separator: ",") {
            let pair = parameter.trimmingCharacters(in: .whitespaces)
            guard let equals = pair.firstIndex(of: "=") else { throw invalid("has a parameter without '='") }
            let name = pair[..<equals].lowercased()
            let value = Substring(pair[pair.index(after: equals)...])
            switch name {
            case "t": token = value
            case "k": key = value
            default: continue
            }
        }
        guard let token, let key else { throw invalid("lacks its t= or k= parameter") }
        let publicKey = try VAPIDKey.publicKey(applicationServerKey: String(key))

        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerBytes = WebPushBase64URL.decode(parts[0]),
              let claimsBytes = WebPushBase64URL.decode(parts[1]),
              let signatureBytes = WebPushBase64URL.decode(parts[2]),
              let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: Data(claimsBytes))) as? [String: Any]
        else { throw invalid("does not hold a JWT of three base64url JSON parts") }
        guard header["alg"] as? String == "ES256" else { throw invalid("is not signed with ES256") }
        if let type = header["typ"], (type as? String)?.uppercased() != "JWT" {
            throw invalid("has a typ that is not JWT")
        }
        guard signatureBytes.count == 64,
              let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
              publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8))
        else { throw invalid("has a signature that k= does not verify") }
        guard let audience = claims["aud"] as? String else { throw invalid("has no aud claim") }
        guard let exp = (claims["exp"] as? NSNumber)?.doubleValue, exp.isFinite else {
            throw invalid("has no numeric exp claim")
        }
        let expiresAt = Date(timeIntervalSince1970: exp)
        guard expiresAt > now else { throw invalid("has expired") }
        guard expiresAt.timeIntervalSince(now) <= VAPIDSigner.maximumLifetime else {
            throw invalid("expires more than 24 hours from now")
        }
        return Claims(audience: audience, expiresAt: expiresAt, subject: claims["sub"] as? String, applicationServerKey: String(key))
    }
}
