import NIOSSL

/// A TLS failure that reconnecting cannot fix: a client certificate the server refuses (expired, revoked, from
/// an unknown CA), or a server certificate pgpush does not trust. Retried as transient, it would spend every
/// token's attempts; the worker pauses the app instead, with the provider's reading of it
/// (``HTTP2ProviderRules/tlsRefusalReason(_:)``).
public enum TLSRefusal: String, Sendable, Hashable, CaseIterable {
    case serverNotTrusted, serverNameMismatch
    case certificateExpired, certificateRevoked, unknownIssuer, certificateRefused, certificateRequired, accessDenied
    case handshakeRefused, noSharedCipher, noSharedVersion, notTLS

    /// Matched against BoringSSL's error names, most specific first.
    static let markers: [(marker: String, refusal: TLSRefusal)] = [
        ("CERTIFICATE_VERIFY_FAILED", .serverNotTrusted),
        ("CERTIFICATE_EXPIRED", .certificateExpired),
        ("CERTIFICATE_REVOKED", .certificateRevoked),
        ("UNKNOWN_CA", .unknownIssuer),
        ("BAD_CERTIFICATE", .certificateRefused),
        ("CERTIFICATE_UNKNOWN", .certificateRefused),
        ("UNSUPPORTED_CERTIFICATE", .certificateRefused),
        ("CERTIFICATE_REQUIRED", .certificateRequired),
        ("ACCESS_DENIED", .accessDenied),
        ("HANDSHAKE_FAILURE", .handshakeRefused),
        ("NO_SHARED_CIPHER", .noSharedCipher),
        ("PROTOCOL_VERSION", .noSharedVersion),
        ("WRONG_VERSION_NUMBER", .notTLS),
    ]

    /// The refusal `error` is, `nil` for everything a retry may fix (resets, timeouts, refused connections, DNS).
    public init?(_ error: any Error) {
        switch error {
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            self = .serverNameMismatch
        case is NIOSSLError, is BoringSSLError, is NIOSSLExtraError:
            self.init(description: String(describing: error))
        default:
            return nil
        }
    }

    init?(description: String) {
        guard let match = Self.markers.first(where: { description.contains($0.marker) }) else { return nil }
        self = match.refusal
    }

    /// The code every reason starts with, as `paused_reason` and the dashboard read it.
    public var code: String {
        switch self {
        case .serverNotTrusted, .serverNameMismatch: "TLSServerNotTrusted"
        case .certificateExpired: "TLSCertificateExpired"
        case .certificateRevoked: "TLSCertificateRevoked"
        case .unknownIssuer, .certificateRefused, .certificateRequired, .accessDenied: "TLSCertificateRejected"
        case .handshakeRefused, .noSharedCipher, .noSharedVersion, .notTLS: "TLSHandshakeFailed"
        }
    }
}
