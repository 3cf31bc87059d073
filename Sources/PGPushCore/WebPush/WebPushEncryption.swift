import Crypto
import Foundation

/// Message encryption for Web Push (RFC 8291) in the `aes128gcm` content coding (RFC 8188), one record.
///
/// The body is `salt (16) ‖ rs (4, big-endian, 4096) ‖ idlen (1, = 65) ‖ as_public (65) ‖ ciphertext ‖ tag (16)`,
/// where the sealed record is `plaintext ‖ 0x02 ‖ zero padding`. Keys come from:
/// ```
/// ecdh_secret = ECDH(as_private, ua_public)
/// IKM   = HKDF-SHA256(salt: auth, ikm: ecdh_secret, info: "WebPush: info" ‖ 0x00 ‖ ua_public ‖ as_public, 32)
/// CEK   = HKDF-SHA256(salt: salt, ikm: IKM, info: "Content-Encoding: aes128gcm" ‖ 0x00, 16)
/// NONCE = HKDF-SHA256(salt: salt, ikm: IKM, info: "Content-Encoding: nonce" ‖ 0x00, 12)
/// ```
/// Every primitive is swift-crypto's. Encryption runs once per message on the worker's hot path: it makes one
/// ephemeral key, one ECDH, one HKDF extract for the IKM step and one shared extract for CEK and NONCE, and
/// writes the body into one buffer of its exact size.
public enum WebPushEncryption {
    /// The `Content-Encoding` header value.
    public static let contentEncoding = "aes128gcm"
    /// The record size written in the header. Push services must accept bodies of at least 4096 bytes, and one
    /// record of this size is one body of at most this size.
    public static let recordSize = 4_096
    /// `salt (16) + rs (4) + idlen (1) + as_public (65)`.
    public static let headerLength = 86
    /// The AES-GCM tag.
    public static let tagLength = 16
    /// The most plaintext one message can carry: 4096 − 86 (header) − 16 (tag) − 1 (delimiter) = 3,993 bytes,
    /// less any padding.
    public static let maximumPlaintextLength = recordSize - headerLength - tagLength - 1

    private static let keyInfoPrefix: [UInt8] = Array("WebPush: info".utf8) + [0]
    private static let cekInfo: [UInt8] = Array("Content-Encoding: aes128gcm".utf8) + [0]
    private static let nonceInfo: [UInt8] = Array("Content-Encoding: nonce".utf8) + [0]

    /// Encrypts `plaintext` for a subscription.
    ///
    /// - Parameters:
    ///   - plaintext: At most ``maximumPlaintextLength`` bytes, padding included.
    ///   - keys: The subscription's `p256dh` and `auth`.
    ///   - paddingLength: Zero bytes added after the delimiter so that the body's length says less about the
    ///     plaintext's. 0 by default.
    ///   - ephemeralKey: The application server's key pair for this one message; a fresh one by default. Inject
    ///     one only in tests: reusing it across messages reuses keys.
    ///   - salt: 16 bytes; fresh random ones by default. Inject only in tests.
    /// - Returns: The request body, to be sent with `Content-Encoding: aes128gcm`.
    /// - Throws: ``WebPushError/Code/payloadTooLarge`` when the plaintext and padding exceed 3,993 bytes;
    ///   ``WebPushError/Code/invalidEncryptionParameter`` for a salt that is not 16 bytes or negative padding.
    public static func encrypt(
        _ plaintext: some DataProtocol,
        for keys: WebPushSubscription.Keys,
        paddingLength: Int = 0,
        ephemeralKey: P256.KeyAgreement.PrivateKey = freshEphemeralKey(),
        salt: [UInt8]? = nil
    ) throws(WebPushError) -> [UInt8] {
        guard paddingLength >= 0 else {
            throw WebPushError(.invalidEncryptionParameter, field: "padding", "the padding length is negative")
        }
        guard plaintext.count <= maximumPlaintextLength - paddingLength else {
            throw WebPushError(
                .payloadTooLarge, field: "payload",
                "the payload is \(plaintext.count) bytes\(paddingLength > 0 ? " plus \(paddingLength) of padding" : ""); "
                    + "one Web Push message carries at most \(maximumPlaintextLength) (a 4096-byte aes128gcm record)"
            )
        }
        let salt = salt ?? SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) }
        guard salt.count == 16 else {
            throw WebPushError(.invalidEncryptionParameter, field: "salt", "the salt must be 16 bytes, got \(salt.count)")
        }

        let asPublic = ephemeralKey.publicKey.x963Representation
        let sharedSecret: SharedSecret
        do {
            sharedSecret = try ephemeralKey.sharedSecretFromKeyAgreement(with: keys.publicKey)
        } catch {
            throw WebPushError(.invalidPublicKey, field: "keys.p256dh", "key agreement with keys.p256dh failed")
        }
        let derived = derive(sharedSecret: sharedSecret, auth: keys.auth, uaPublic: keys.p256dh, asPublic: asPublic, salt: salt)

        var record: [UInt8] = []
        record.reserveCapacity(plaintext.count + 1 + paddingLength)
        record.append(contentsOf: plaintext)
        record.append(0x02)
        if paddingLength > 0 { record.append(contentsOf: repeatElement(0, count: paddingLength)) }

        let sealed: AES.GCM.SealedBox
        do {
            sealed = try AES.GCM.seal(record, using: derived.key, nonce: derived.nonce)
        } catch {
            throw WebPushError(.invalidEncryptionParameter, field: nil, "AES-128-GCM sealing failed")
        }

        var body: [UInt8] = []
        body.reserveCapacity(headerLength + record.count + tagLength)
        body.append(contentsOf: salt)
        let rs = UInt32(recordSize)
        body.append(contentsOf: [UInt8(rs >> 24), UInt8(truncatingIfNeeded: rs >> 16), UInt8(truncatingIfNeeded: rs >> 8), UInt8(truncatingIfNeeded: rs)])
        body.append(UInt8(asPublic.count))
        body.append(contentsOf: asPublic)
        body.append(contentsOf: sealed.ciphertext)
        body.append(contentsOf: sealed.tag)
        return body
    }

    /// A new key pair for one message: a scalar of 32 bytes from the secure random source, drawn again in the
    /// vanishingly rare case that it is not a valid P-256 private key (zero, or not below the group order).
    ///
    /// `P256.KeyAgreement.PrivateKey()` makes the same kind of key but also runs its FIPS self-checks (the
    /// public key computed again, a test signature made and verified): 88–113 µs, most of a message's CPU, where
    /// this takes 15–22 µs (BENCHMARKS.md, Web Push).
    public static func freshEphemeralKey() -> P256.KeyAgreement.PrivateKey {
        while true {
            let scalar = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
            if let key = try? P256.KeyAgreement.PrivateKey(rawRepresentation: scalar) { return key }
        }
    }

    /// Encrypts `plaintext` for `subscription`; see ``encrypt(_:for:paddingLength:ephemeralKey:salt:)``.
    public static func encrypt(_ plaintext: some DataProtocol, for subscription: WebPushSubscription) throws(WebPushError) -> [UInt8] {
        try encrypt(plaintext, for: subscription.keys)
    }

    /// Decrypts a body as the user agent does: the simulator's side, and a check on what the sender made.
    ///
    /// Accepts exactly what ``encrypt(_:for:paddingLength:ephemeralKey:salt:)`` makes and what RFC 8291 allows
    /// for one record: a 65-byte key id, a record no longer than the header's record size, ending in the 0x02
    /// delimiter and optional zero padding.
    ///
    /// - Parameters:
    ///   - privateKey: The user agent's private key (the one whose public half is `p256dh`).
    ///   - auth: The subscription's 16-byte authentication secret.
    /// - Returns: The plaintext.
    /// - Throws: ``WebPushError/Code/decryptionFailed`` for a malformed body, a record that does not authenticate
    ///   (tampered with, or made for other keys), or a missing delimiter.
    public static func decrypt(
        _ body: some DataProtocol,
        privateKey: P256.KeyAgreement.PrivateKey,
        auth: [UInt8]
    ) throws(WebPushError) -> [UInt8] {
        func failure(_ reason: String) -> WebPushError {
            WebPushError(.decryptionFailed, field: "body", "the aes128gcm body \(reason)")
        }
        guard auth.count == 16 else {
            throw WebPushError(.invalidAuthSecret, field: "keys.auth", "keys.auth must be 16 bytes, got \(auth.count)")
        }
        let bytes = Array(body)
        guard bytes.count >= headerLength else { throw failure("is shorter than its 86-byte header") }
        let salt = Array(bytes[0..<16])
        let rs = bytes[16..<20].reduce(0) { ($0 << 8) | Int($1) }
        let idLength = Int(bytes[20])
        guard idLength == 65 else { throw failure("has a key id of \(idLength) bytes, not a 65-byte P-256 public key") }
        guard rs >= 18 else { throw failure("has a record size below 18") }
        let asPublicBytes = Array(bytes[21..<headerLength])
        let record = bytes[headerLength...]
        guard record.count >= tagLength + 1 else { throw failure("has no record") }
        guard record.count <= rs else { throw failure("holds more than one record") }

        let asPublic: P256.KeyAgreement.PublicKey
        do {
            asPublic = try P256.KeyAgreement.PublicKey(x963Representation: asPublicBytes)
        } catch {
            throw failure("has a key id that is not a point on the P-256 curve")
        }
        let sharedSecret: SharedSecret
        do {
            sharedSecret = try privateKey.sharedSecretFromKeyAgreement(with: asPublic)
        } catch {
            throw failure("has a key id that key agreement refuses")
        }
        let derived = derive(
            sharedSecret: sharedSecret, auth: auth, uaPublic: Array(privateKey.publicKey.x963Representation),
            asPublic: asPublicBytes, salt: salt
        )
        let opened: Data
        do {
            let box = try AES.GCM.SealedBox(nonce: derived.nonce, ciphertext: record.dropLast(tagLength), tag: record.suffix(tagLength))
            opened = try AES.GCM.open(box, using: derived.key)
        } catch {
            throw failure("does not authenticate: it was altered, or made for another key or auth secret")
        }
        guard let delimiter = opened.lastIndex(where: { $0 != 0 }) else {
            throw failure("has a record of padding only, without a delimiter")
        }
        guard opened[delimiter] == 0x02 else {
            throw failure("does not end in the last-record delimiter 0x02")
        }
        return Array(opened[opened.startIndex..<delimiter])
    }

    /// The keys RFC 8291 §3.4 and RFC 8188 §2.2–2.3 derive; `ikm` is kept for the Appendix A test.
    struct Derived {
        var ikm: SymmetricKey
        var key: SymmetricKey
        var nonce: AES.GCM.Nonce
    }

    static func derive(
        sharedSecret: SharedSecret,
        auth: [UInt8],
        uaPublic: [UInt8],
        asPublic: some DataProtocol,
        salt: [UInt8]
    ) -> Derived {
        var keyInfo: [UInt8] = []
        keyInfo.reserveCapacity(keyInfoPrefix.count + uaPublic.count + asPublic.count)
        keyInfo.append(contentsOf: keyInfoPrefix)
        keyInfo.append(contentsOf: uaPublic)
        keyInfo.append(contentsOf: asPublic)
        let ikm = sharedSecret.hkdfDerivedSymmetricKey(using: SHA256.self, salt: auth, sharedInfo: keyInfo, outputByteCount: 32)
        // One extract serves both expansions: HKDF(salt, IKM, info, L) = Expand(Extract(salt, IKM), info, L).
        let prk = HKDF<SHA256>.extract(inputKeyMaterial: ikm, salt: salt)
        let key = HKDF<SHA256>.expand(pseudoRandomKey: prk, info: cekInfo, outputByteCount: 16)
        let nonceBytes = HKDF<SHA256>.expand(pseudoRandomKey: prk, info: nonceInfo, outputByteCount: 12)
        // A 12-byte nonce is always valid.
        let nonce = nonceBytes.withUnsafeBytes { try! AES.GCM.Nonce(data: $0) }
        return Derived(ikm: ikm, key: key, nonce: nonce)
    }
}
