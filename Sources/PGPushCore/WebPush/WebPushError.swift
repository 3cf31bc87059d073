/// The error of the Web Push building blocks: a code to branch on, the field that is wrong, and a message that
/// names that field and says why.
///
/// Messages never quote key material, auth secrets or whole endpoints (an endpoint and its keys are enough to
/// push to a device). They may quote values an operator configured, such as an allowed origin.
public struct WebPushError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure this is. New codes are new `static let`s.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// A subscription is not the JSON object `PushSubscription.toJSON()` returns (not JSON, a field missing
        /// or of the wrong type).
        public static let malformedSubscription = Code("malformedSubscription")
        /// The endpoint is not an absolute `https` URL with a host, has user info, or is too long.
        public static let invalidEndpoint = Code("invalidEndpoint")
        /// `keys.p256dh` is not base64url of an uncompressed P-256 point on the curve.
        public static let invalidPublicKey = Code("invalidPublicKey")
        /// `keys.auth` is not base64url of 16 bytes.
        public static let invalidAuthSecret = Code("invalidAuthSecret")
        /// The plaintext (with its padding) does not fit in one 4096-byte record.
        public static let payloadTooLarge = Code("payloadTooLarge")
        /// An encryption parameter (salt, padding) is out of range.
        public static let invalidEncryptionParameter = Code("invalidEncryptionParameter")
        /// An `aes128gcm` body is malformed, was tampered with, or was not made for this key and auth secret.
        public static let decryptionFailed = Code("decryptionFailed")
        /// A VAPID key could not be read, is not a PEM P-256 private key, or is not a valid public key.
        public static let invalidVAPIDKey = Code("invalidVAPIDKey")
        /// A VAPID subject breaks RFC 8292 or the rules of Apple's push service.
        public static let invalidVAPIDSubject = Code("invalidVAPIDSubject")
        /// A VAPID token lifetime or renewal margin is out of range.
        public static let invalidVAPIDLifetime = Code("invalidVAPIDLifetime")
        /// An `Authorization: vapid …` header or its token is malformed, badly signed, or expired (the push
        /// service's side, for simulators and tests).
        public static let invalidVAPIDToken = Code("invalidVAPIDToken")
        /// Signing a VAPID token failed (not expected to happen with a valid key).
        public static let signingFailed = Code("signingFailed")
        /// An origin (configured or derived) is not `https://host[:port]`.
        public static let invalidOrigin = Code("invalidOrigin")

        public var description: String { rawValue }
    }

    public let code: Code
    /// The field or setting that is wrong, e.g. `endpoint`, `keys.p256dh`, `keys.auth`, `subject`; `nil` when the
    /// whole input is.
    public let field: String?
    /// Readable and safe to log.
    public let message: String

    public init(_ code: Code, field: String?, _ message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
