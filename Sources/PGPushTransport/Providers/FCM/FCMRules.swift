import NIOHPACK
import PGPushCore

/// FCM's rules for a pool (and for the OAuth token endpoint its access tokens come from): answers keep their
/// JSON bodies, which the dispatcher classifies; nothing retires a connection; a 401 without an FCM error
/// detail rejects the access token; there is no one-stream start.
public struct FCMRules: HTTP2ProviderRules {
    /// Which service a pool talks to; it only names the pool in log lines.
    public enum Service: Sendable, Hashable {
        case send, oauth
    }

    public var service: Service

    public init(_ service: Service = .send) {
        self.service = service
    }

    public var provider: PushProvider { .fcm }

    public var description: String { service == .oauth ? "Google OAuth" : PushProvider.fcm.displayName }

    public func response(status: Int, headers: HPACKHeaders, body: [UInt8], keepsBody: Bool) -> ProviderResponse {
        var retryAfter: String?
        if status != 200 {
            for (name, value, _) in headers where HTTP2HeaderName.matches(name, "retry-after") {
                retryAfter = value
                break
            }
        }
        // FCM's and OAuth's error objects have no top-level reason: the body is the answer.
        return ProviderResponse(status: status, retryAfter: retryAfter, body: keepsBody ? body : [])
    }

    public var responseHeaderNames: [String] { ["retry-after"] }

    public func goAwayReason(debugData: String) -> String? { nil }

    public func retiresConnection(_ response: ProviderResponse) -> Bool { false }

    public func tokenRejectionReason(_ response: ProviderResponse, credentials: ProviderCredentials) -> String? {
        guard case .bearer = credentials else { return nil }
        return response.fcmAccessTokenRejection
    }

    public func startsWithSingleStream(_ credentials: ProviderCredentials) -> Bool { false }

    public func tlsRefusalReason(_ refusal: TLSRefusal) -> String {
        let server = service == .oauth ? "the Google OAuth server" : "the FCM server"
        // The OAuth endpoint is the service account's token_uri; --fcm-ca-file is trusted for both.
        let endpoint = service == .oauth ? "the service account's token_uri" : "--fcm-endpoint"
        let text = switch refusal {
        case .serverNotTrusted: "\(server)'s certificate did not verify (check \(endpoint) and --fcm-ca-file)"
        case .serverNameMismatch: "\(server)'s certificate does not name its host (check \(endpoint))"
        case .certificateExpired: "\(server) refused the client certificate as expired"
        case .certificateRevoked: "\(server) refused the client certificate as revoked"
        case .unknownIssuer: "\(server) does not know the client certificate's issuer"
        case .certificateRefused: "\(server) refused the client certificate"
        case .certificateRequired: "\(server) requires a client certificate"
        case .accessDenied: "\(server) denied access to the client certificate"
        case .handshakeRefused: "\(server) refused the TLS handshake"
        case .noSharedCipher: "no TLS cipher in common with \(server)"
        case .noSharedVersion: "no TLS version in common with \(server)"
        case .notTLS: "\(server) does not speak TLS"
        }
        return "\(refusal.code): \(text)"
    }
}
