import NIOCore
import NIOSSL
import Testing
@testable import PGPushTransport

@Suite("TLS rejections a reconnect cannot fix")
struct TLSRejectionTests {
    @Test(arguments: [
        ("error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED", "TLSServerNotTrusted"),
        ("error:10000415:SSL routines:OPENSSL_internal:SSLV3_ALERT_CERTIFICATE_EXPIRED", "TLSCertificateExpired"),
        ("error:1000041c:SSL routines:OPENSSL_internal:SSLV3_ALERT_CERTIFICATE_REVOKED", "TLSCertificateRevoked"),
        ("error:10000418:SSL routines:OPENSSL_internal:TLSV1_ALERT_UNKNOWN_CA", "TLSCertificateRejected"),
        ("error:10000412:SSL routines:OPENSSL_internal:SSLV3_ALERT_BAD_CERTIFICATE", "TLSCertificateRejected"),
        ("error:1000045c:SSL routines:OPENSSL_internal:TLSV1_CERTIFICATE_REQUIRED", "TLSCertificateRejected"),
        ("error:10000410:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE", "TLSHandshakeFailed"),
        ("error:1000009c:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER", "TLSHandshakeFailed"),
    ])
    func boringSSLErrorsThatNoRetryFixesHaveAReadableReason(description: String, code: String) {
        let reason = TLSRejection.reason(forDescription: "handshakeFailed(sslError([\(description)]))")
        #expect(reason?.hasPrefix(code + ": ") == true, "\(reason ?? "nil")")
    }

    @Test func transientFailuresAreNotRejections() {
        #expect(TLSRejection.reason(for: ChannelError.connectTimeout(.seconds(1))) == nil)
        #expect(TLSRejection.reason(for: IOError(errnoCode: 104, reason: "read")) == nil)
        #expect(TLSRejection.reason(for: NIOSSLError.uncleanShutdown) == nil)
        #expect(TLSRejection.reason(forDescription: "connection reset by peer") == nil)
        #expect(TLSRejection.reason(for: NIOSSLExtraError.failedToValidateHostname)?.hasPrefix("TLSServerNotTrusted") == true)
    }
}
