import NIOSSL

/// TLS failures that reconnecting cannot fix: a client certificate APNs refuses (expired, revoked, from an
/// unknown CA), or a server certificate pgpush does not trust. Retried as transient, they would spend every
/// token's attempts; the worker pauses the app with this reason instead.
public enum TLSRejection {
    /// Matched against BoringSSL's error names, most specific first. Every reason is readable on its own, as
    /// it becomes the app's `paused_reason`.
    static let rules: [(marker: String, reason: String)] = [
        ("CERTIFICATE_VERIFY_FAILED",
         "TLSServerNotTrusted: the APNs server's certificate did not verify (check --apns-endpoint and --apns-ca-file)"),
        ("CERTIFICATE_EXPIRED", "TLSCertificateExpired: APNs refused the client certificate as expired"),
        ("CERTIFICATE_REVOKED", "TLSCertificateRevoked: APNs refused the client certificate as revoked"),
        ("UNKNOWN_CA", "TLSCertificateRejected: APNs does not know the client certificate's issuer"),
        ("BAD_CERTIFICATE", "TLSCertificateRejected: APNs refused the client certificate"),
        ("CERTIFICATE_UNKNOWN", "TLSCertificateRejected: APNs refused the client certificate"),
        ("UNSUPPORTED_CERTIFICATE", "TLSCertificateRejected: APNs refused the client certificate"),
        ("CERTIFICATE_REQUIRED", "TLSCertificateRejected: APNs requires a client certificate"),
        ("ACCESS_DENIED", "TLSCertificateRejected: APNs denied access to the client certificate"),
        ("HANDSHAKE_FAILURE", "TLSHandshakeFailed: APNs refused the TLS handshake"),
        ("NO_SHARED_CIPHER", "TLSHandshakeFailed: no TLS cipher in common with the APNs server"),
        ("PROTOCOL_VERSION", "TLSHandshakeFailed: no TLS version in common with the APNs server"),
        ("WRONG_VERSION_NUMBER", "TLSHandshakeFailed: the APNs endpoint does not speak TLS"),
    ]

    /// The pause reason when `error` is a TLS failure a retry cannot fix, `nil` for everything else (resets,
    /// timeouts, refused connections, DNS).
    public static func reason(for error: any Error) -> String? {
        switch error {
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            return "TLSServerNotTrusted: the APNs server's certificate does not name its host (check --apns-endpoint)"
        case is NIOSSLError, is BoringSSLError, is NIOSSLExtraError:
            return reason(forDescription: String(describing: error))
        default:
            return nil
        }
    }

    static func reason(forDescription description: String) -> String? {
        rules.first { description.contains($0.marker) }?.reason
    }
}
