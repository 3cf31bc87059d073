import Crypto
import struct Foundation.UUID

/// Deterministic `apns-id` values, so a re-send of the same (job, token) carries the same id and
/// duplicates can be traced in APNs responses and in `push.deliveries`.
public enum APNsID {
    /// The project's fixed UUIDv5 namespace. Changing it changes every id ever derived; never do that.
    public static let namespace = UUID(uuidString: "5abad2b6-23d9-4ba4-8198-c02f154c442d")!

    /// The RFC 4122 version-5 UUID of the name `"<jobID>:<lowercased token>"` in ``namespace``.
    /// The token is lowercased so upper- and lower-case spellings of one token map to one id.
    public static func make(jobID: Int64, token: String) -> UUID {
        uuidV5(namespace: namespace, name: "\(jobID):\(token.lowercased())")
    }

    /// RFC 4122 §4.3: SHA-1 over namespace bytes then name bytes, first 16 bytes, version 5, variant 10.
    static func uuidV5(namespace: UUID, name: String) -> UUID {
        var hasher = Insecure.SHA1()
        withUnsafeBytes(of: namespace.uuid) { hasher.update(bufferPointer: $0) }
        hasher.update(data: Array(name.utf8))
        var bytes = Array(hasher.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(uuid: (
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
            bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
        ))
    }
}
