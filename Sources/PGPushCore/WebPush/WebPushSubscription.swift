import Crypto
import Foundation

/// A browser's push subscription, as `PushSubscription.toJSON()` returns it and a website posts it to its backend:
/// `{"endpoint": "https://…", "expirationTime": null, "keys": {"p256dh": "…", "auth": "…"}}`.
///
/// Everything in it comes from the internet, so it is checked here once, when it is registered:
/// - `endpoint`: an absolute `https` URL with a host, no user info, at most 2,048 characters of printable ASCII.
///   Its path is opaque and never interpreted. Whether the worker may send to its origin is a separate decision,
///   ``WebPushOrigins/allows(_:)``.
/// - `keys.p256dh`: base64url (with or without padding) of a 65-byte uncompressed P-256 point on the curve.
/// - `keys.auth`: base64url of exactly 16 bytes.
///
/// Equality compares the endpoint, the key bytes and the expiration time.
public struct WebPushSubscription: Sendable, Hashable {
    /// The most characters an endpoint may have. Real ones are under 500.
    public static let maximumEndpointLength = 2_048
    /// The most bytes ``init(json:)`` reads; a real subscription is about 400.
    public static let maximumJSONLength = 8_192

    /// The endpoint, exactly as the browser gave it.
    public let endpoint: String
    /// The endpoint's origin, `https://host[:port]`.
    public let origin: WebPushOrigin
    /// `p256dh` and `auth`, decoded and checked.
    public let keys: Keys
    /// `expirationTime` (milliseconds since 1970 in the JSON), when the browser gave one; browsers mostly give
    /// `null`.
    public let expirationTime: Date?

    /// The keys a message to this subscription is encrypted for (RFC 8291).
    public struct Keys: Sendable, Hashable {
        /// The user agent's public key (`ua_public`).
        public let publicKey: P256.KeyAgreement.PublicKey
        /// `ua_public` uncompressed: 65 bytes, 0x04 first. Kept as bytes because RFC 8291's key info needs them.
        public let p256dh: [UInt8]
        /// The 16-byte authentication secret.
        public let auth: [UInt8]

        /// Decodes and checks base64url `p256dh` and `auth`, as stored with a subscription.
        ///
        /// - Throws: ``WebPushError`` with ``WebPushError/Code/invalidPublicKey`` (field `keys.p256dh`) or
        ///   ``WebPushError/Code/invalidAuthSecret`` (field `keys.auth`).
        public init(p256dh: String, auth: String) throws(WebPushError) {
            guard let keyBytes = WebPushBase64URL.decode(p256dh) else {
                throw WebPushError(.invalidPublicKey, field: "keys.p256dh", "keys.p256dh is not base64url")
            }
            guard let authBytes = WebPushBase64URL.decode(auth) else {
                throw WebPushError(.invalidAuthSecret, field: "keys.auth", "keys.auth is not base64url")
            }
            try self.init(p256dh: keyBytes, auth: authBytes)
        }

        /// Checks raw `p256dh` (65 bytes, uncompressed point) and `auth` (16 bytes).
        public init(p256dh: [UInt8], auth: [UInt8]) throws(WebPushError) {
            guard p256dh.count == 65, p256dh.first == 0x04 else {
                throw WebPushError(
                    .invalidPublicKey, field: "keys.p256dh",
                    "keys.p256dh must be a 65-byte uncompressed P-256 point (0x04 first), got \(p256dh.count) bytes"
                )
            }
            guard auth.count == 16 else {
                throw WebPushError(
                    .invalidAuthSecret, field: "keys.auth", "keys.auth must be 16 bytes, got \(auth.count)"
                )
            }
            do {
                self.publicKey = try P256.KeyAgreement.PublicKey(x963Representation: p256dh)
            } catch {
                throw WebPushError(.invalidPublicKey, field: "keys.p256dh", "keys.p256dh is not a point on the P-256 curve")
            }
            self.p256dh = p256dh
            self.auth = auth
        }

        /// `p256dh` as base64url without padding, the form to store.
        public var p256dhBase64URL: String { WebPushBase64URL.encode(p256dh) }
        /// `auth` as base64url without padding, the form to store.
        public var authBase64URL: String { WebPushBase64URL.encode(auth) }

        public static func == (lhs: Keys, rhs: Keys) -> Bool {
            lhs.p256dh == rhs.p256dh && lhs.auth == rhs.auth
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(p256dh)
            hasher.combine(auth)
        }
    }

    /// Checks the parts of a subscription, e.g. as read back from storage.
    ///
    /// - Throws: ``WebPushError`` naming `endpoint`, `keys.p256dh` or `keys.auth`.
    public init(endpoint: String, p256dh: String, auth: String, expirationTime: Date? = nil) throws(WebPushError) {
        try self.init(endpoint: endpoint, keys: Keys(p256dh: p256dh, auth: auth), expirationTime: expirationTime)
    }

    public init(endpoint: String, keys: Keys, expirationTime: Date? = nil) throws(WebPushError) {
        self.origin = try Self.checkEndpoint(endpoint)
        self.endpoint = endpoint
        self.keys = keys
        self.expirationTime = expirationTime
    }

    /// Parses `PushSubscription.toJSON()`'s object. Unknown fields are ignored; `expirationTime` may be missing,
    /// `null` or a number of milliseconds.
    ///
    /// - Throws: ``WebPushError`` with ``WebPushError/Code/malformedSubscription`` for JSON of the wrong shape, or
    ///   the code of the field that fails its check.
    public init(json: some DataProtocol) throws(WebPushError) {
        guard json.count <= Self.maximumJSONLength else {
            throw WebPushError(.malformedSubscription, field: nil, "the subscription is larger than \(Self.maximumJSONLength) bytes")
        }
        let raw: RawSubscription
        do {
            raw = try JSONDecoder().decode(RawSubscription.self, from: Data(json))
        } catch let DecodingError.typeMismatch(_, context) {
            throw Self.wrongType(context.codingPath)
        } catch let DecodingError.valueNotFound(_, context) {
            throw Self.wrongType(context.codingPath)
        } catch {
            // The decoder's own message is left out: it can quote the text around the point it failed at.
            throw WebPushError(.malformedSubscription, field: nil, "the subscription is not a JSON object")
        }
        guard let endpoint = raw.endpoint else { throw Self.missing("endpoint", code: .invalidEndpoint) }
        guard let keys = raw.keys else { throw Self.missing("keys", code: .malformedSubscription, type: "an object") }
        guard let p256dh = keys.p256dh else { throw Self.missing("keys.p256dh", code: .invalidPublicKey) }
        guard let auth = keys.auth else { throw Self.missing("keys.auth", code: .invalidAuthSecret) }
        var expirationTime: Date?
        if let milliseconds = raw.expirationTime {
            guard milliseconds.isFinite, milliseconds >= 0 else {
                throw WebPushError(
                    .malformedSubscription, field: "expirationTime",
                    "expirationTime must be null or a non-negative number of milliseconds"
                )
            }
            expirationTime = Date(timeIntervalSince1970: milliseconds / 1000)
        }
        try self.init(endpoint: endpoint, p256dh: p256dh, auth: auth, expirationTime: expirationTime)
    }

    private struct RawSubscription: Decodable {
        var endpoint: String?
        var expirationTime: Double?
        var keys: RawKeys?
    }

    private struct RawKeys: Decodable {
        var p256dh: String?
        var auth: String?
    }

    private static func wrongType(_ path: [any CodingKey]) -> WebPushError {
        let field = path.map(\.stringValue).joined(separator: ".")
        let code: WebPushError.Code = switch field {
        case "endpoint": .invalidEndpoint
        case "keys.p256dh": .invalidPublicKey
        case "keys.auth": .invalidAuthSecret
        default: .malformedSubscription
        }
        return WebPushError(code, field: field.isEmpty ? nil : field, "\(field.isEmpty ? "the subscription" : field) has the wrong JSON type")
    }

    private static func missing(_ field: String, code: WebPushError.Code, type: String = "a string") -> WebPushError {
        WebPushError(code, field: field, "\(field) is missing or not \(type)")
    }

    /// The endpoint's origin, or the reason it is refused. The message never quotes the endpoint: with the keys,
    /// it is enough to push to the device.
    static func checkEndpoint(_ endpoint: String) throws(WebPushError) -> WebPushOrigin {
        func refuse(_ reason: String) -> WebPushError {
            WebPushError(.invalidEndpoint, field: "endpoint", "endpoint \(reason)")
        }
        guard !endpoint.isEmpty else { throw refuse("is empty") }
        guard endpoint.utf8.count <= maximumEndpointLength else {
            throw refuse("is longer than \(maximumEndpointLength) characters")
        }
        guard endpoint.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw refuse("contains whitespace, control or non-ASCII characters")
        }
        guard let url = URL(string: endpoint), let scheme = url.scheme else {
            throw refuse("is not an absolute URL")
        }
        guard scheme.lowercased() == "https" else { throw refuse("is not an https URL") }
        guard let host = url.host(percentEncoded: true), !host.isEmpty else { throw refuse("has no host") }
        // `https://@host/` has an empty user that Foundation may report as nil: look at the authority itself.
        let afterScheme = endpoint.utf8.dropFirst(scheme.utf8.count + 1)
        let authority = afterScheme.starts(with: "//".utf8)
            ? afterScheme.dropFirst(2).prefix { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
            : afterScheme.prefix(0)
        guard url.user(percentEncoded: true) == nil, url.password(percentEncoded: true) == nil,
              !authority.contains(UInt8(ascii: "@"))
        else { throw refuse("must not contain user info") }
        do {
            return try WebPushOrigin(url: url)
        } catch {
            throw refuse("has an invalid host or port")
        }
    }
}
