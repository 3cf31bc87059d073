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
        let refusal = TLSRefusal(description: "handshakeFailed(sslError([\(description)]))")
        let reason = refusal.map(APNsRules().tlsRefusalReason)
        #expect(reason?.hasPrefix(code + ": ") == true, "\(reason ?? "nil")")
        #expect(refusal?.code == code)
    }

    @Test func transientFailuresAreNotRejections() {
        #expect(TLSRefusal(ChannelError.connectTimeout(.seconds(1))) == nil)
        #expect(TLSRefusal(IOError(errnoCode: 104, reason: "read")) == nil)
        #expect(TLSRefusal(NIOSSLError.uncleanShutdown) == nil)
        #expect(TLSRefusal(description: "connection reset by peer") == nil)
        #expect(TLSRefusal(NIOSSLExtraError.failedToValidateHostname).map(APNsRules().tlsRefusalReason)?.hasPrefix("TLSServerNotTrusted") == true)
    }

    @Test func eachProviderReadsARefusalWithTheSameCode() {
        #expect(APNsRules().tlsRefusalReason(.certificateExpired) == "TLSCertificateExpired: APNs refused the client certificate as expired")
        for refusal in TLSRefusal.allCases {
            for rules in [FCMRules(.send), FCMRules(.oauth)] {
                let reason = rules.tlsRefusalReason(refusal)
                #expect(reason.hasPrefix(refusal.code + ": "), "\(reason)")
                #expect(!reason.contains("APNs") && !reason.contains("--apns"), "\(reason)")
            }
        }
    }
}
