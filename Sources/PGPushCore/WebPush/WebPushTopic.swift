import Crypto

/// The RFC 8030 `Topic` header of a message, made from the job's collapse id.
///
/// A push service keeps only the newest undelivered message per subscription and topic, so a topic is Web Push's
/// collapse id. RFC 8030 §5.4 restricts it to at most 32 characters of the URL-safe base64 alphabet
/// (`A–Z a–z 0–9 - _`, no padding). The mapping from a collapse id is:
/// - a collapse id that is already a valid topic (1–32 characters of that alphabet) is sent unchanged, so a
///   producer who chooses topics sees them as is;
/// - any other collapse id (longer, or with other characters) becomes the first 24 bytes of its UTF-8 SHA-256,
///   base64url without padding: exactly 32 characters. The mapping is deterministic, so the same collapse id
///   always gives the same topic and collapsing still works; two different collapse ids colliding would take a
///   192-bit hash collision.
///
/// A hashed topic cannot be told apart from a chosen 32-character one, which is harmless: both are just names.
public struct WebPushTopic: Sendable, Hashable, CustomStringConvertible {
    /// RFC 8030 §5.4.
    public static let maximumLength = 32
    /// The header's name.
    public static let headerName = "Topic"

    /// The header value.
    public let value: String

    /// The topic for `collapseID`; `nil` when there is none (a `nil` or empty collapse id: no `Topic` header).
    public init?(collapseID: String?) {
        guard let collapseID, !collapseID.isEmpty else { return nil }
        if Self.isValid(collapseID) {
            value = collapseID
        } else {
            let digest = SHA256.hash(data: Array(collapseID.utf8))
            value = WebPushBase64URL.encode(digest.prefix(24))
        }
    }

    /// Whether `text` may be sent as a `Topic` as it is: 1–32 characters of the URL-safe base64 alphabet.
    public static func isValid(_ text: String) -> Bool {
        (1...maximumLength).contains(text.utf8.count) && text.utf8.allSatisfy(WebPushBase64URL.isAlphabet)
    }

    public var description: String { value }
}
