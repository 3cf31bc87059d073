import Crypto
import Foundation

/// The parts of an ES256 provider token (JWT) that APNs looks at.
struct ParsedProviderToken: Sendable, Hashable {
    var keyID: String
    var teamID: String
    var issuedAt: Int64
    var signingInput: Data
    var signature: Data

    /// Parses `header.claims.signature`; `nil` when the token is not a well-formed ES256 JWT with `kid`, `iss`, `iat`.
    init?(_ jwt: Substring) {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerData = Base64URL.decode(parts[0]),
              let claimsData = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]),
              let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any],
              header["alg"] as? String == "ES256",
              let keyID = header["kid"] as? String,
              let teamID = claims["iss"] as? String,
              let issuedAt = (claims["iat"] as? NSNumber)?.int64Value
        else { return nil }
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
        self.signingInput = Data(jwt[..<parts[1].endIndex].utf8)
        self.signature = signature
    }

    /// Whether `key` made the signature (raw r||s, as JWS requires).
    func isSigned(by key: P256.Signing.PublicKey) -> Bool {
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
        return key.isValidSignature(signature, for: signingInput)
    }
}

enum Base64URL {
    static func decode(_ text: Substring) -> Data? {
        var base64 = String(text).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
