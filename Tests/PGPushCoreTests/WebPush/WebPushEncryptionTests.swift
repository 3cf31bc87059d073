import Crypto
import Foundation
import Testing
@testable import PGPushCore

/// RFC 8291 Appendix A (Section 5's example), its line breaks and spaces removed.
private enum RFC8291Example {
    static let plaintext = "When I grow up, I want to be a watermelon"
    static let asPublic = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    static let asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let uaPublic = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let uaPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"
    static let ecdhSecret = "kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs"
    static let ikm = "S4lYMb_L0FxCeq0WhDx813KgSYqU26kOyzWUdsXYyrg"
    static let cek = "oIhVW04MRdy2XN9CiKLxTg"
    static let nonce = "4h_95klXJ5E_qnoN"
    static let body = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"

    static func bytes(_ text: String) -> [UInt8] { WebPushBase64URL.decode(text)! }
    static func asKey() throws -> P256.KeyAgreement.PrivateKey { try .init(rawRepresentation: bytes(asPrivate)) }
    static func uaKey() throws -> P256.KeyAgreement.PrivateKey { try .init(rawRepresentation: bytes(uaPrivate)) }
    static func keys() throws -> WebPushSubscription.Keys { try .init(p256dh: uaPublic, auth: auth) }
}

@Suite struct WebPushEncryptionTests {
    @Test func rfc8291AppendixAExactBytes() throws {
        let asKey = try RFC8291Example.asKey()
        #expect(WebPushBase64URL.encode(asKey.publicKey.x963Representation) == RFC8291Example.asPublic)
        let body = try WebPushEncryption.encrypt(
            Array(RFC8291Example.plaintext.utf8), for: RFC8291Example.keys(),
            ephemeralKey: asKey, salt: RFC8291Example.bytes(RFC8291Example.salt)
        )
        #expect(WebPushBase64URL.encode(body) == RFC8291Example.body)
        #expect(body == RFC8291Example.bytes(RFC8291Example.body))
    }

    @Test func rfc8291AppendixAIntermediateValues() throws {
        let asKey = try RFC8291Example.asKey()
        let keys = try RFC8291Example.keys()
        let shared = try asKey.sharedSecretFromKeyAgreement(with: keys.publicKey)
        #expect(shared.withUnsafeBytes { WebPushBase64URL.encode($0) } == RFC8291Example.ecdhSecret)
        let derived = WebPushEncryption.derive(
            sharedSecret: shared, auth: keys.auth, uaPublic: keys.p256dh,
            asPublic: asKey.publicKey.x963Representation, salt: RFC8291Example.bytes(RFC8291Example.salt)
        )
        #expect(derived.ikm.withUnsafeBytes { WebPushBase64URL.encode($0) } == RFC8291Example.ikm)
        #expect(derived.key.withUnsafeBytes { WebPushBase64URL.encode($0) } == RFC8291Example.cek)
        #expect(derived.nonce.withUnsafeBytes { WebPushBase64URL.encode($0) } == RFC8291Example.nonce)
    }

    @Test func rfc8291AppendixADecrypts() throws {
        let plaintext = try WebPushEncryption.decrypt(
            RFC8291Example.bytes(RFC8291Example.body), privateKey: RFC8291Example.uaKey(),
            auth: RFC8291Example.bytes(RFC8291Example.auth)
        )
        #expect(String(decoding: plaintext, as: UTF8.self) == RFC8291Example.plaintext)
    }

    @Test func headerLayout() throws {
        let agent = WebPushTestUserAgent()
        let subscription = try agent.subscription()
        let body = try WebPushEncryption.encrypt(Array("hello".utf8), for: subscription)
        #expect(body.count == 86 + 5 + 1 + 16)
        #expect(Array(body[16..<20]) == [0x00, 0x00, 0x10, 0x00])
        #expect(body[20] == 65)
        #expect(body[21] == 0x04)
        _ = try P256.KeyAgreement.PublicKey(x963Representation: body[21..<86])
    }

    @Test(arguments: [0, 1, 41, 1_000, 3_993])
    func roundTrips(length: Int) throws {
        let agent = WebPushTestUserAgent()
        let plaintext = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let body = try WebPushEncryption.encrypt(plaintext, for: agent.subscription())
        #expect(body.count == 86 + length + 1 + 16)
        #expect(body.count <= WebPushEncryption.recordSize)
        #expect(try WebPushEncryption.decrypt(body, privateKey: agent.privateKey, auth: agent.auth) == plaintext)
    }

    @Test func freshKeyAndSaltForEveryMessage() throws {
        let keys = try WebPushTestUserAgent().subscription().keys
        let first = try WebPushEncryption.encrypt(Array("same".utf8), for: keys)
        let second = try WebPushEncryption.encrypt(Array("same".utf8), for: keys)
        #expect(first[0..<16] != second[0..<16])
        #expect(first[21..<86] != second[21..<86])
        #expect(first[86...] != second[86...])
    }

    @Test func paddingRoundTripsAndCountsTowardsTheLimit() throws {
        let agent = WebPushTestUserAgent()
        let body = try WebPushEncryption.encrypt(Array("hi".utf8), for: agent.subscription().keys, paddingLength: 100)
        #expect(body.count == 86 + 2 + 1 + 100 + 16)
        #expect(try WebPushEncryption.decrypt(body, privateKey: agent.privateKey, auth: agent.auth) == Array("hi".utf8))
        #expect(throws: WebPushError.self) {
            try WebPushEncryption.encrypt([UInt8](repeating: 1, count: 3_900), for: agent.subscription().keys, paddingLength: 94)
        }
    }

    @Test func refusesAPayloadLargerThan3993Bytes() throws {
        let keys = try WebPushTestUserAgent().subscription().keys
        #expect(WebPushEncryption.maximumPlaintextLength == 3_993)
        do {
            _ = try WebPushEncryption.encrypt([UInt8](repeating: 0x41, count: 3_994), for: keys)
            Issue.record("a 3,994-byte payload was encrypted")
        } catch {
            #expect(error.code == .payloadTooLarge)
            #expect(error.message.contains("3994 bytes"))
            #expect(error.message.contains("at most 3993"))
        }
    }

    @Test func refusesABadSalt() throws {
        let keys = try WebPushTestUserAgent().subscription().keys
        #expect { try WebPushEncryption.encrypt([1], for: keys, salt: [1, 2, 3]) } throws: { error in
            (error as? WebPushError)?.code == .invalidEncryptionParameter
        }
    }

    @Test func tamperedBodiesDoNotDecrypt() throws {
        let agent = WebPushTestUserAgent()
        let body = try WebPushEncryption.encrypt(Array("secret message".utf8), for: agent.subscription())
        // Any flipped bit in the salt, the sender's key or the record fails; so does a cut or an extension.
        for index in [0, 15, 40, 86, body.count - 17, body.count - 1] {
            var tampered = body
            tampered[index] ^= 0x01
            let error = #expect(throws: WebPushError.self) {
                try WebPushEncryption.decrypt(tampered, privateKey: agent.privateKey, auth: agent.auth)
            }
            #expect(error?.code == .decryptionFailed, "byte \(index)")
        }
        for cut in [body.dropLast(), body.prefix(85), body.prefix(100)] {
            #expect(throws: WebPushError.self) {
                try WebPushEncryption.decrypt(cut, privateKey: agent.privateKey, auth: agent.auth)
            }
        }
        var wrongIDLength = body
        wrongIDLength[20] = 64
        #expect(throws: WebPushError.self) {
            try WebPushEncryption.decrypt(wrongIDLength, privateKey: agent.privateKey, auth: agent.auth)
        }
    }

    @Test func wrongAuthSecretOrKeyDoesNotDecrypt() throws {
        let agent = WebPushTestUserAgent()
        let body = try WebPushEncryption.encrypt(Array("secret message".utf8), for: agent.subscription())
        var wrongAuth = agent.auth
        wrongAuth[0] ^= 0x80
        let error = #expect(throws: WebPushError.self) {
            try WebPushEncryption.decrypt(body, privateKey: agent.privateKey, auth: wrongAuth)
        }
        #expect(error?.code == .decryptionFailed)
        #expect(throws: WebPushError.self) {
            try WebPushEncryption.decrypt(body, privateKey: P256.KeyAgreement.PrivateKey(), auth: agent.auth)
        }
    }

    @Test func decryptRequiresTheLastRecordDelimiter() throws {
        // A record sealed by hand with the 0x01 (not last) delimiter, under the keys the header names.
        let agent = WebPushTestUserAgent()
        let keys = try agent.subscription().keys
        let asKey = P256.KeyAgreement.PrivateKey()
        let salt = [UInt8](repeating: 7, count: 16)
        let derived = WebPushEncryption.derive(
            sharedSecret: try asKey.sharedSecretFromKeyAgreement(with: keys.publicKey), auth: keys.auth,
            uaPublic: keys.p256dh, asPublic: asKey.publicKey.x963Representation, salt: salt
        )
        let sealed = try AES.GCM.seal(Array("abc".utf8) + [0x01], using: derived.key, nonce: derived.nonce)
        let body = salt + [0, 0, 0x10, 0, 65] + Array(asKey.publicKey.x963Representation) + Array(sealed.ciphertext) + Array(sealed.tag)
        let error = #expect(throws: WebPushError.self) {
            try WebPushEncryption.decrypt(body, privateKey: agent.privateKey, auth: agent.auth)
        }
        #expect(error?.message.contains("0x02") == true)
    }
}
