import Crypto
import CryptoExtras
import Foundation
import Testing
@testable import PGPushCore

private func base64URL(_ data: Data) -> String {
    data.base64EncodedString()
        .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
}

/// Builds and signs a JWT without the code under test, so the verifier's checks can be aimed one at a time.
private func handMadeJWT(header: String, claims: String, key: _RSA.Signing.PrivateKey = fcmTestKey) throws -> String {
    let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
    let signature = try key.signature(for: SHA256.hash(data: Data(input.utf8)), padding: .insecurePKCS1v1_5)
    return input + "." + base64URL(signature.rawRepresentation)
}

/// A JWT part decoded and parsed as a JSON object.
private func jsonObject(_ part: Substring) throws -> [String: Any] {
    let data = try #require(base64URLDecode(part))
    return try #require(JSONSerialization.jsonObject(with: data) as? [String: Any])
}

private let email = "pgpush@pgpush-test.iam.gserviceaccount.com"
private let audience = "https://oauth2.googleapis.com/token"
private let scope = "https://www.googleapis.com/auth/firebase.messaging"
private let keyID = "0123456789abcdef0123456789abcdef01234567"
private let iat: Int64 = 1_700_000_000
private let header = #"{"alg":"RS256","typ":"JWT","kid":"\#(keyID)"}"#

private func claims(iss: String = email, scope: String = scope, aud: String = audience, iat: Int64 = iat, exp: Int64 = iat + 3600) -> String {
    #"{"iss":"\#(iss)","scope":"\#(scope)","aud":"\#(aud)","iat":\#(iat),"exp":\#(exp)}"#
}

private let verifier = FCMAssertionVerifier(clientEmail: email, tokenURI: audience, publicKey: fcmTestKey.publicKey, privateKeyID: keyID)
private let now = Date(timeIntervalSince1970: TimeInterval(iat) + 10)

private func rejection(_ jwt: String, at date: Date = now, by verifier: FCMAssertionVerifier = verifier) -> FCMAssertionRejection? {
    do {
        _ = try verifier.verify(jwt, now: date)
        return nil
    } catch {
        return error
    }
}

@Suite struct FCMAssertionSignerTests {
    @Test func headerClaimsAndSignature() throws {
        let signer = FCMAssertionSigner(account: try fcmTestAccount())
        let assertion = try signer.sign(issuedAt: Date(timeIntervalSince1970: 1_700_000_123.9))
        #expect(assertion.issuedAt == Date(timeIntervalSince1970: 1_700_000_123))
        #expect(assertion.expiresAt == Date(timeIntervalSince1970: 1_700_000_123 + 3600))
        #expect(!assertion.jwt.contains("="))

        let parts = assertion.jwt.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let header = try jsonObject(parts[0])
        let claims = try jsonObject(parts[1])
        #expect(header.count == 3)
        #expect(header["alg"] as? String == "RS256")
        #expect(header["typ"] as? String == "JWT")
        #expect(header["kid"] as? String == keyID)
        #expect(claims.count == 5)
        #expect(claims["iss"] as? String == email)
        #expect(claims["scope"] as? String == scope)
        #expect(claims["aud"] as? String == audience)
        #expect((claims["iat"] as? NSNumber)?.int64Value == 1_700_000_123)
        #expect((claims["exp"] as? NSNumber)?.int64Value == Int64(1_700_000_123 + 3600))

        let signature = _RSA.Signing.RSASignature(rawRepresentation: try #require(base64URLDecode(parts[2])))
        #expect(signature.rawRepresentation.count == 256)
        let input = Data("\(parts[0]).\(parts[1])".utf8)
        #expect(fcmTestKey.publicKey.isValidSignature(signature, for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5))
        #expect(!fcmTestKey.publicKey.isValidSignature(signature, for: SHA256.hash(data: input), padding: .PSS))
        #expect(!fcmTestKey.publicKey.isValidSignature(signature, for: SHA256.hash(data: Data("\(parts[0]).x".utf8)), padding: .insecurePKCS1v1_5))
    }

    @Test(arguments: [(3600.0, 3600), (600, 600), (7200, 3600), (59.9, 59), (0, 1), (-5, 1), (.nan, 3600), (.infinity, 3600)] as [(TimeInterval, Int)])
    func lifetimeIsClampedToAnHour(lifetime: TimeInterval, expected: Int) throws {
        let signer = FCMAssertionSigner(account: try fcmTestAccount())
        let assertion = try signer.sign(issuedAt: Date(timeIntervalSince1970: 1_700_000_000), lifetime: lifetime)
        #expect(assertion.expiresAt.timeIntervalSince(assertion.issuedAt) == TimeInterval(expected))
    }

    @Test func escapesIdentifiersInTheJSON() throws {
        let account = try FCMServiceAccount(json: fcmServiceAccountJSON(["private_key_id": #"k"e\y"#, "client_email": "a\"b@example.com"]))
        let jwt = try FCMAssertionSigner(account: account).sign(issuedAt: now).jwt
        let parts = jwt.split(separator: ".")
        let header = try jsonObject(parts[0])
        let claims = try jsonObject(parts[1])
        #expect(header["kid"] as? String == #"k"e\y"#)
        #expect(claims["iss"] as? String == "a\"b@example.com")
        #expect(throws: Never.self) { try FCMAssertionVerifier(account: account).verify(jwt, now: now) }
    }

    @Test func tokenRequestBody() throws {
        let assertion = try FCMAssertionSigner(account: try fcmTestAccount()).sign(issuedAt: now)
        #expect(assertion.tokenRequestBody
            == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion.jwt)
        #expect(FCMAssertionSigner.tokenRequestBody(assertion: "a.b+c/d=") == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b%2Bc%2Fd%3D")
        #expect(FCMAssertionSigner.formEncoded("A z~-._&=é\n") == "A%20z~-._%26%3D%C3%A9%0A")
    }

    @Test func descriptionHidesTheJWT() throws {
        let assertion = try FCMAssertionSigner(account: try fcmTestAccount()).sign(issuedAt: now)
        #expect(assertion.description == "FCMAssertion(iat: 1700000010, exp: 1700003610)")
        for text in [String(describing: assertion), String(reflecting: assertion), "\(assertion)"] {
            #expect(!text.contains(assertion.jwt.prefix(20)))
        }
    }
}

@Suite struct FCMAssertionVerifierTests {
    @Test func roundTrip() throws {
        let account = try fcmTestAccount()
        let assertion = try FCMAssertionSigner(account: account).sign(issuedAt: Date(timeIntervalSince1970: TimeInterval(iat)))
        let verified = try FCMAssertionVerifier(account: account).verify(assertion.jwt, now: now)
        #expect(verified.issuedAt == assertion.issuedAt)
        #expect(verified.expiresAt == assertion.expiresAt)
        #expect(verified.keyID == keyID)
        // The hand-made token the other tests start from is valid, so each rejection below has one cause.
        #expect(rejection(try handMadeJWT(header: header, claims: claims())) == nil)
    }

    @Test func wrongKey() throws {
        let otherKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        #expect(rejection(try handMadeJWT(header: header, claims: claims(), key: otherKey)) == .badSignature)
        let otherVerifier = FCMAssertionVerifier(clientEmail: email, tokenURI: audience, publicKey: otherKey.publicKey)
        #expect(rejection(try handMadeJWT(header: header, claims: claims()), by: otherVerifier) == .badSignature)
    }

    @Test func tamperedClaims() throws {
        let genuine = try handMadeJWT(header: header, claims: claims()).split(separator: ".")
        let forged = genuine[0] + "." + base64URL(Data(claims(iss: "attacker@example.com").utf8)) + "." + genuine[2]
        #expect(rejection(String(forged)) == .badSignature)
    }

    @Test func pssSignatureIsNotRS256() throws {
        let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims().utf8))
        let pss = try fcmTestKey.signature(for: SHA256.hash(data: Data(input.utf8)), padding: .PSS)
        #expect(rejection(input + "." + base64URL(pss.rawRepresentation)) == .badSignature)
    }

    @Test func wrongClaims() throws {
        #expect(rejection(try handMadeJWT(header: header, claims: claims(aud: "https://oauth2.example.com/token"))) == .wrongAudience)
        #expect(rejection(try handMadeJWT(header: header, claims: claims(scope: "https://www.googleapis.com/auth/cloud-platform"))) == .wrongScope)
        #expect(rejection(try handMadeJWT(header: header, claims: claims(scope: ""))) == .wrongScope)
        #expect(rejection(try handMadeJWT(header: header, claims: claims(iss: "someone@example.com"))) == .wrongIssuer)
        // Extra scopes ride along.
        #expect(rejection(try handMadeJWT(header: header, claims: claims(scope: "openid \(scope)"))) == nil)
    }

    @Test func expiry() throws {
        let jwt = try handMadeJWT(header: header, claims: claims(exp: iat + 600))
        #expect(rejection(jwt, at: Date(timeIntervalSince1970: TimeInterval(iat + 599))) == nil)
        #expect(rejection(jwt, at: Date(timeIntervalSince1970: TimeInterval(iat + 600))) == .expired)
        #expect(rejection(jwt, at: Date(timeIntervalSince1970: TimeInterval(iat + 7200))) == .expired)
    }

    @Test func issuedInTheFuture() throws {
        let jwt = try handMadeJWT(header: header, claims: claims())
        #expect(rejection(jwt, at: Date(timeIntervalSince1970: TimeInterval(iat - 60))) == nil)
        #expect(rejection(jwt, at: Date(timeIntervalSince1970: TimeInterval(iat - 61))) == .issuedInTheFuture)
    }

    @Test func lifetime() throws {
        #expect(rejection(try handMadeJWT(header: header, claims: claims(exp: iat + 3600))) == nil)
        #expect(rejection(try handMadeJWT(header: header, claims: claims(exp: iat + 3601))) == .invalidLifetime)
        // exp before iat, with iat inside the skew so only the lifetime is wrong.
        let backwards = claims(iat: iat + 50, exp: iat + 40)
        #expect(rejection(try handMadeJWT(header: header, claims: backwards)) == .invalidLifetime)
        #expect(rejection(try handMadeJWT(header: header, claims: claims(iat: .min, exp: .max))) == .invalidLifetime)
    }

    @Test(arguments: ["", "abc", "a.b", "a.b.c.d", "....", "eyJ+.eyJ.sig", "a b.c.d", String(repeating: "a", count: 20_000)])
    func notAJWT(text: String) {
        #expect(rejection(text) == .notAJWT)
    }

    @Test func algorithmMustBeRS256() throws {
        let unsigned = base64URL(Data(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + base64URL(Data(claims().utf8)) + "."
        #expect(rejection(unsigned) == .unsupportedAlgorithm)
        let hs256 = try handMadeJWT(header: #"{"alg":"HS256","typ":"JWT","kid":"\#(keyID)"}"#, claims: claims())
        #expect(rejection(hs256) == .unsupportedAlgorithm)
        let lowercase = try handMadeJWT(header: #"{"alg":"rs256","kid":"\#(keyID)"}"#, claims: claims())
        #expect(rejection(lowercase) == .unsupportedAlgorithm)
    }

    @Test func malformedParts() throws {
        #expect(rejection(try handMadeJWT(header: "not json", claims: claims())) == .malformedHeader)
        #expect(rejection(try handMadeJWT(header: #"{"typ":"JWT"}"#, claims: claims())) == .malformedHeader)
        let stringIat = #"{"iss":"\#(email)","scope":"\#(scope)","aud":"\#(audience)","iat":"\#(iat)","exp":\#(iat + 60)}"#
        #expect(rejection(try handMadeJWT(header: header, claims: stringIat)) == .malformedClaims)
        #expect(rejection(try handMadeJWT(header: header, claims: "[]")) == .malformedClaims)
    }

    @Test func keyIDMustMatch() throws {
        let otherKid = try handMadeJWT(header: #"{"alg":"RS256","typ":"JWT","kid":"other"}"#, claims: claims())
        #expect(rejection(otherKid) == .wrongKeyID)
        let noKid = try handMadeJWT(header: #"{"alg":"RS256","typ":"JWT"}"#, claims: claims())
        #expect(rejection(noKid) == .wrongKeyID)
        // Without an expected key id, any kid is fine.
        let lenient = FCMAssertionVerifier(clientEmail: email, tokenURI: audience, publicKey: fcmTestKey.publicKey)
        #expect(rejection(noKid, by: lenient) == nil)
    }

    @Test func rejectionsAreInvalidGrantAndQuoteNothing() throws {
        let all: [FCMAssertionRejection] = [
            .notAJWT, .malformedHeader, .unsupportedAlgorithm, .wrongKeyID, .badSignature, .malformedClaims,
            .wrongIssuer, .wrongAudience, .wrongScope, .issuedInTheFuture, .expired, .invalidLifetime,
        ]
        #expect(Set(all.map(\.description)).count == all.count)
        for rejection in all {
            #expect(rejection.oauthError == "invalid_grant")
            #expect(!rejection.description.contains(email))
            #expect(!rejection.description.contains("eyJ"))
        }
    }
}
