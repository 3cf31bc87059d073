import Crypto
import Foundation

/// A signed VAPID token (RFC 8292) for one audience.
///
/// `description` never shows the JWT: until it expires, anyone holding it can push to that origin's
/// subscriptions bound to the key.
public struct VAPIDToken: Sendable, Hashable, CustomStringConvertible {
    /// The compact JWT: `{"typ":"JWT","alg":"ES256"}` . `{"aud","exp","sub"}` . raw r‖s, each base64url.
    public let jwt: String
    /// The `aud` claim: the origin of the endpoints this token serves.
    public let audience: WebPushOrigin
    /// The `exp` claim, whole seconds.
    public let expiresAt: Date
    /// The signing key's `applicationServerKey`, the `k=` parameter.
    public let applicationServerKey: String
    /// The value of the `Authorization` header: `vapid t=<jwt>, k=<applicationServerKey>`. Built once, sent with
    /// every request to ``audience`` until the token is renewed.
    public let authorization: String

    public init(jwt: String, audience: WebPushOrigin, expiresAt: Date, applicationServerKey: String) {
        self.jwt = jwt
        self.audience = audience
        self.expiresAt = expiresAt
        self.applicationServerKey = applicationServerKey
        self.authorization = "vapid t=" + jwt + ", k=" + applicationServerKey
    }

    public var description: String {
        "VAPIDToken(aud: \(audience), exp: \(Int64(expiresAt.timeIntervalSince1970)))"
    }
}

/// Signs VAPID tokens (RFC 8292 §2) with ES256 for one key and subject.
public struct VAPIDSigner: Sendable {
    /// RFC 8292 §2: `exp` must be no more than 24 hours after the request.
    public static let maximumLifetime: TimeInterval = 24 * 3600
    /// 12 hours: far enough from the 24-hour limit that a push service whose clock is ahead still accepts it.
    public static let defaultLifetime: TimeInterval = 12 * 3600
    /// The header is the same for every token: `{"typ":"JWT","alg":"ES256"}`, base64url.
    static let encodedHeader = WebPushBase64URL.encode(Array(#"{"typ":"JWT","alg":"ES256"}"#.utf8))

    public let key: VAPIDKey
    public let subject: VAPIDSubject

    public init(key: VAPIDKey, subject: VAPIDSubject) {
        self.key = key
        self.subject = subject
    }

    /// Signs a token for `audience` whose `exp` is `now` (truncated to whole seconds) plus `lifetime`.
    ///
    /// - Parameter lifetime: Seconds, truncated to whole seconds; 1 s to 24 h.
    /// - Throws: ``WebPushError/Code/invalidVAPIDLifetime`` for a lifetime out of range;
    ///   ``WebPushError/Code/signingFailed`` if swift-crypto cannot sign.
    public func sign(audience: WebPushOrigin, now: Date, lifetime: TimeInterval = defaultLifetime) throws(WebPushError) -> VAPIDToken {
        guard lifetime >= 1, lifetime <= Self.maximumLifetime else {
            throw WebPushError(
                .invalidVAPIDLifetime, field: "lifetime", "a VAPID token must expire between 1 s and 24 h after it is signed"
            )
        }
        let exp = Int64(now.timeIntervalSince1970.rounded(.down)) + Int64(lifetime.rounded(.down))
        // aud is an origin (ASCII letters, digits, '.', '-', '_', ':', '[', ']', '/'): nothing to escape.
        let claims = #"{"aud":""# + audience.serialized + #"","exp":\#(exp),"sub":"# + FCMJSONText.quoted(subject.value) + "}"
        let signingInput = Self.encodedHeader + "." + WebPushBase64URL.encode(claims.utf8)
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try key.privateKey.signature(for: Data(signingInput.utf8))
        } catch {
            throw WebPushError(.signingFailed, field: nil, "signing the VAPID token for \(audience) failed")
        }
        return VAPIDToken(
            jwt: signingInput + "." + WebPushBase64URL.encode(signature.rawRepresentation),
            audience: audience,
            expiresAt: Date(timeIntervalSince1970: TimeInterval(exp)),
            applicationServerKey: key.applicationServerKey
        )
    }
}
