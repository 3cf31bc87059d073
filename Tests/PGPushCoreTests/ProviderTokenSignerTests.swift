import Crypto
import Foundation
import Testing
import PGPushCore

func base64URLDecode(_ text: Substring) -> Data? {
    var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
    return Data(base64Encoded: base64)
}

/// SEC1 `ECPrivateKey` DER for a P-256 key (RFC 5915), built by hand so the SEC1 path is tested without key files.
func sec1PEM(of key: P256.Signing.PrivateKey) -> String {
    var der: [UInt8] = [0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20]
    der += key.rawRepresentation
    der += [0xA0, 0x0A, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]
    der += [0xA1, 0x44, 0x03, 0x42, 0x00]
    der += key.publicKey.x963Representation
    let body = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
    return "-----BEGIN EC PRIVATE KEY-----\n\(body)\n-----END EC PRIVATE KEY-----\n"
}

@Suite struct ProviderTokenSignerTests {
    let key = P256.Signing.PrivateKey()

    @Test func jwtStructureClaimsAndSignature() throws {
        let signer = try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: key.pemRepresentation)
        let token = try signer.sign(issuedAt: Date(timeIntervalSince1970: 1_700_000_123.9))

        #expect(token.teamID == "TEAM123456")
        #expect(token.keyID == "KEY1234567")
        #expect(token.issuedAt == Date(timeIntervalSince1970: 1_700_000_123))
        #expect(!token.jwt.contains("="))

        let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let headerData = try #require(base64URLDecode(parts[0]))
        let claimsData = try #require(base64URLDecode(parts[1]))
        let header = try #require(JSONSerialization.jsonObject(with: headerData) as? [String: Any])
        let claims = try #require(JSONSerialization.jsonObject(with: claimsData) as? [String: Any])
        #expect(header.count == 2)
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEY1234567")
        #expect(claims.count == 2)
        #expect(claims["iss"] as? String == "TEAM123456")
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_700_000_123)

        let signatureBytes = try #require(base64URLDecode(parts[2]))
        #expect(signatureBytes.count == 64)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        let signingInput = Data("\(parts[0]).\(parts[1])".utf8)
        #expect(key.publicKey.isValidSignature(signature, for: signingInput))
        #expect(!key.publicKey.isValidSignature(signature, for: Data("\(parts[0]).x".utf8)))
        #expect(!P256.Signing.PrivateKey().publicKey.isValidSignature(signature, for: signingInput))
    }

    @Test func acceptsSEC1() throws {
        let signer = try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: sec1PEM(of: key))
        #expect(signer.publicKey.rawRepresentation == key.publicKey.rawRepresentation)
        let token = try signer.sign(issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let parts = token.jwt.split(separator: ".")
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: #require(base64URLDecode(parts[2])))
        #expect(key.publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))
    }

    @Test func rejectsBadKeysWithoutLeakingThem() {
        let garbage = "-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVU\n-----END PRIVATE KEY-----\n"
        #expect {
            try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: garbage)
        } throws: { error in
            guard let error = error as? PGPushError else { return false }
            return error.code == .invalidCredential && !error.description.contains("U0VDUkVU")
        }
        let p384 = P384.Signing.PrivateKey().pemRepresentation
        #expect(throws: PGPushError.self) {
            try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: p384)
        }
    }

    @Test func rejectsIdentifiersThatCouldBreakTheJSON() {
        for bad in ["", "TEAM\"1234", "TEAM 12345", String(repeating: "A", count: 65)] {
            #expect(throws: PGPushError.self) {
                try ProviderTokenSigner(teamID: bad, keyID: "KEY1234567", privateKeyPEM: key.pemRepresentation)
            }
            #expect(throws: PGPushError.self) {
                try ProviderTokenSigner(teamID: "TEAM123456", keyID: bad, privateKeyPEM: key.pemRepresentation)
            }
        }
    }

    @Test func tellsItsOwnTokensFromAnotherKeysUnderTheSameIds() throws {
        let signer = try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: key.pemRepresentation)
        let other = try ProviderTokenSigner(
            teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation)
        let mine = try signer.sign(issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let theirs = try other.sign(issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        #expect(signer.signed(mine))
        #expect(!signer.signed(theirs))
        // Claims changed under the signature, and tokens that are not JWTs at all.
        let parts = mine.jwt.split(separator: ".")
        let laterClaims = Data(#"{"iss":"TEAM123456","iat":1700000001}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        let forged = "\(parts[0]).\(laterClaims).\(parts[2])"
        for jwt in [forged, "", "a.b", "a.b.c", "\(parts[0]).\(parts[1]).!!!", "\(parts[0]).\(parts[1])."] {
            #expect(!signer.signed(ProviderToken(jwt: jwt, issuedAt: mine.issuedAt, teamID: mine.teamID, keyID: mine.keyID)))
        }
    }

    @Test func descriptionDoesNotPrintTheJWT() throws {
        let signer = try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: key.pemRepresentation)
        let token = try signer.sign(issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let signaturePart = String(token.jwt.split(separator: ".")[2])
        #expect(!token.description.contains(signaturePart))
        #expect(!"\(token)".contains(token.jwt))
        #expect(token.description.contains("KEY1234567"))
    }
}
