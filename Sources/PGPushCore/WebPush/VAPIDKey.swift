import Crypto
import Foundation

/// The application server's P-256 key pair (RFC 8292): its private half signs VAPID tokens, its public half is the
/// `applicationServerKey` a website passes to `pushManager.subscribe` and the `k=` of every request.
///
/// A push service may bind a subscription to this key, so rotating it means every browser must subscribe again.
/// Neither `description`, the mirror (`dump`) nor any error shows the private key.
public struct VAPIDKey: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    let privateKey: P256.Signing.PrivateKey
    /// The public key, uncompressed (65 bytes, 0x04 first), base64url without padding: the `applicationServerKey`
    /// for the website, and the `k=` parameter of the `Authorization` header. It also identifies the key in
    /// ``VAPIDTokenCache``.
    public let applicationServerKey: String

    public init(privateKey: P256.Signing.PrivateKey) {
        self.privateKey = privateKey
        self.applicationServerKey = WebPushBase64URL.encode(privateKey.publicKey.x963Representation)
    }

    /// Reads a PEM P-256 private key: PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1 (`BEGIN EC PRIVATE KEY`).
    ///
    /// - Throws: ``WebPushError/Code/invalidVAPIDKey``; the message never quotes the PEM.
    public init(pemRepresentation: String) throws(WebPushError) {
        do {
            try self.init(privateKey: P256.Signing.PrivateKey(pemRepresentation: pemRepresentation))
        } catch {
            // The underlying error is dropped on purpose: nothing of the key may reach a log.
            throw WebPushError(
                .invalidVAPIDKey, field: "vapid key",
                "the VAPID key is not a PEM-encoded P-256 private key (PKCS#8 \"PRIVATE KEY\" or SEC1 \"EC PRIVATE KEY\")"
            )
        }
    }

    /// Reads a PEM P-256 private key from a file.
    ///
    /// - Throws: ``WebPushError/Code/invalidVAPIDKey`` naming the path (never the contents) when the file cannot be
    ///   read or is not such a key.
    public init(pemFile path: String) throws(WebPushError) {
        let contents: Data
        do {
            contents = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw WebPushError(.invalidVAPIDKey, field: "vapid key", "the VAPID key file \(path) cannot be read")
        }
        guard contents.count <= 64 * 1024, let text = String(data: contents, encoding: .utf8) else {
            throw WebPushError(.invalidVAPIDKey, field: "vapid key", "the VAPID key file \(path) is not a PEM text file")
        }
        do {
            try self.init(pemRepresentation: text)
        } catch {
            throw WebPushError(
                .invalidVAPIDKey, field: "vapid key",
                "the VAPID key file \(path) does not hold a PEM-encoded P-256 private key (PKCS#8 \"PRIVATE KEY\" or SEC1 \"EC PRIVATE KEY\")"
            )
        }
    }

    /// A new random key.
    public static func generate() -> VAPIDKey {
        VAPIDKey(privateKey: P256.Signing.PrivateKey())
    }

    /// The private key as PKCS#8 PEM (`BEGIN PRIVATE KEY`), to be written to a file only the sender can read.
    public var privateKeyPEM: String { privateKey.pemRepresentation }

    public var publicKey: P256.Signing.PublicKey { privateKey.publicKey }

    /// Decodes an `applicationServerKey` (or a `k=` parameter) into a public key, for checking tokens.
    ///
    /// - Throws: ``WebPushError/Code/invalidVAPIDKey`` unless it is base64url of an uncompressed point on P-256.
    public static func publicKey(applicationServerKey: String) throws(WebPushError) -> P256.Signing.PublicKey {
        guard let bytes = WebPushBase64URL.decode(applicationServerKey), bytes.count == 65, bytes.first == 0x04,
              let key = try? P256.Signing.PublicKey(x963Representation: bytes)
        else {
            throw WebPushError(
                .invalidVAPIDKey, field: "k",
                "the VAPID public key is not base64url of a 65-byte uncompressed P-256 point"
            )
        }
        return key
    }

    public var description: String { "VAPIDKey(applicationServerKey: \(applicationServerKey))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["applicationServerKey": applicationServerKey]) }
}
