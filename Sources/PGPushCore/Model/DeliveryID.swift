import Crypto
import struct Foundation.UUID
import typealias Foundation.uuid_t

/// Deterministic delivery ids, so a re-send of the same (job, token) carries the same id and duplicates can be
/// traced in the providers' answers and in `push.deliveries` (its `apns_id` column, named before FCM and Web Push).
/// APNs gets it as the request's `apns-id`; FCM and Web Push deliveries are recorded under it too.
public enum DeliveryID {
    /// The project's fixed UUIDv5 namespace. Changing it changes every id ever derived; never do that.
    public static let namespace = UUID(uuidString: "5abad2b6-23d9-4ba4-8198-c02f154c442d")!

    /// The RFC 4122 version-5 UUID of the name `"<jobID>:<lowercased token>"` in ``namespace``.
    /// The token is lowercased so upper- and lower-case spellings of one token map to one id.
    ///
    /// One id is made per request, so the name is hashed in place: building it as a string cost four heap
    /// allocations, more than the SHA-1 itself.
    public static func make(jobID: Int64, token: String) -> UUID {
        var hasher = startHash(namespace)
        updateWithJobPrefix(&hasher, jobID)
        // Stored tokens are lowercase already (the enqueue normalises them): they are hashed in place, and only
        // others need a lowercased copy.
        var token = token
        let hashed = token.withUTF8 { bytes in
            guard !needsLowercasing(bytes) else { return false }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(bytes))
            return true
        }
        if !hashed { update(&hasher, with: token.lowercased()) }
        return finish(hasher)
    }

    /// Whether `bytes` hold an ASCII capital or anything not ASCII: a loop over the bytes themselves, which the
    /// compiler vectorises, where a `contains(where:)` over the string's UTF-8 view cost more than the SHA-1.
    private static func needsLowercasing(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var found = false
        for byte in bytes { found = found || (byte &- UInt8(ascii: "A") < 26) || byte >= 0x80 }
        return found
    }

    /// Hashes `"<jobID>:"`, its digits written on the stack.
    private static func updateWithJobPrefix(_ hasher: inout Insecure.SHA1, _ jobID: Int64) {
        jobID.withDecimalASCII { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        withUnsafeBytes(of: UInt8(ascii: ":")) { hasher.update(bufferPointer: $0) }
    }

    /// RFC 4122 §4.3: SHA-1 over namespace bytes then name bytes, first 16 bytes, version 5, variant 10.
    static func uuidV5(namespace: UUID, name: String) -> UUID {
        var hasher = startHash(namespace)
        update(&hasher, with: name)
        return finish(hasher)
    }

    private static func startHash(_ namespace: UUID) -> Insecure.SHA1 {
        var hasher = Insecure.SHA1()
        withUnsafeBytes(of: namespace.uuid) { hasher.update(bufferPointer: $0) }
        return hasher
    }

    private static func update(_ hasher: inout Insecure.SHA1, with text: String) {
        var text = text
        text.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
    }

    private static func finish(_ hasher: Insecure.SHA1) -> UUID {
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        hasher.finalize().withUnsafeBytes { digest in
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: digest.prefix(16))) }
        }
        uuid.6 = (uuid.6 & 0x0F) | 0x50
        uuid.8 = (uuid.8 & 0x3F) | 0x80
        return UUID(uuid: uuid)
    }
}
