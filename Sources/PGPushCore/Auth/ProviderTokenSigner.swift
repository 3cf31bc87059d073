import Crypto
import Foundation

/// Signs APNs provider tokens with the P-256 key of a `.p8` file.
///
/// The JWT is `{"alg":"ES256","kid":KEYID}` . `{"iss":TEAMID,"iat":SECONDS}` . raw r||s signature,
/// each part base64url without padding.
public struct ProviderTokenSigner: Sendable {
    public let teamID: String
    public let keyID: String
    private let key: P256.Signing.PrivateKey

    /// - Parameters:
    ///   - teamID: The Apple developer team id (10 characters); the `iss` claim.
    ///   - keyID: The key id of the `.p8` key (10 characters); the `kid` header.
    ///   - privateKeyPEM: The key as PEM: PKCS#8 (`BEGIN PRIVATE KEY`, Apple's `.p8`) or SEC1 (`BEGIN EC PRIVATE KEY`).
    /// - Throws: ``PGPushError`` with ``PGPushError/Code/invalidConfiguration`` for malformed ids, or
    ///   ``PGPushError/Code/invalidCredential`` when the PEM is not a P-256 private key. No key material
    ///   ever appears in the error.
    public init(teamID: String, keyID: String, privateKeyPEM: String) throws(PGPushError) {
        try Self.checkIdentifier(teamID, name: "team id")
        try Self.checkIdentifier(keyID, name: "key id")
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
        } catch {
            // The underlying CryptoKit error does not echo the input, but keep it out of `description` anyway.
            throw PGPushError(
                .invalidCredential,
                "the provider key for key id \(keyID) is not a PEM-encoded P-256 private key",
                underlying: error
            )
        }
        self.teamID = teamID
        self.keyID = keyID
    }

    /// The public half, for checking signatures (tests, simulators).
    public var publicKey: P256.Signing.PublicKey { key.publicKey }

    /// Signs a token whose `iat` is `issuedAt` truncated to whole seconds.
    public func sign(issuedAt: Date) throws(PGPushError) -> ProviderToken {
        let seconds = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        // The ids are restricted to [A-Za-z0-9] in init, so interpolating them cannot break the JSON.
        let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(seconds)}"#
        let signingInput = Self.base64URL(Data(header.utf8)) + "." + Self.base64URL(Data(claims.utf8))
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try key.signature(for: Data(signingInput.utf8))
        } catch {
            throw PGPushError(.internal, "signing the provider token for key id \(keyID) failed", underlying: error)
        }
        return ProviderToken(
            jwt: signingInput + "." + Self.base64URL(signature.rawRepresentation),
            issuedAt: Date(timeIntervalSince1970: TimeInterval(seconds)),
            teamID: teamID,
            keyID: keyID
        )
    }

    /// Whether this signer's key made `token`: its ES256 signature verifies against the public half. A token
    /// shared through the database may come from another key file under the same key id (a wrong file that
    /// was since replaced), which APNs would refuse.
    public func signed(_ token: ProviderToken) -> Bool {
        let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let raw = Self.base64URLDecoded(parts[2]),
              let signature = try? P256.Signing.ECDSASignature(rawRepresentation: raw)
        else { return false }
        return key.publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8))
    }

    static func base64URLDecoded(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }

    static func base64URL(_ data: Data) -> String {
        var text = data.base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-")
        text = text.replacingOccurrences(of: "/", with: "_")
        text = text.replacingOccurrences(of: "=", with: "")
        return text
    }

    private static func checkIdentifier(_ value: String, name: String) throws(PGPushError) {
        let isAlphanumeric = value.utf8.allSatisfy { byte in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
        }
        guard (1...64).contains(value.utf8.count), isAlphanumeric else {
            throw PGPushError(.invalidConfiguration, "the \(name) must be 1–64 letters or digits (Apple's are 10)")
        }
    }
}
