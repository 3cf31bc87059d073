import Foundation
import NIOHPACK
import PGPushCore

/// APNs' rules for a pool: answers carry `apns-id` and, on errors, a JSON `reason`; GOAWAY debug data is the
/// same JSON; `UnrelatedKeyIdInToken`, `Shutdown` and `IdleTimeout` retire a connection; a 403 names the
/// provider token; token authentication gets one stream until a request succeeds.
public struct APNsRules: HTTP2ProviderRules {
    /// Which of APNs' services a pool talks to; it only names the pool in log lines.
    public enum Service: Sendable, Hashable {
        case push, channelManagement, broadcast
    }

    public var service: Service

    public init(_ service: Service = .push) {
        self.service = service
    }

    public var provider: PushProvider { service == .broadcast ? .apnsBroadcast : .apns }

    public var description: String {
        switch service {
        case .push: PushProvider.apns.displayName
        case .channelManagement: "\(PushProvider.apns.displayName) channel management"
        case .broadcast: PushProvider.apnsBroadcast.displayName
        }
    }

    public func response(status: Int, headers: HPACKHeaders, body: [UInt8], keepsBody: Bool) -> ProviderResponse {
        var deliveryID: String?
        var retryAfter: String?
        var channelID: String?
        for (name, value, _) in headers {
            switch APNsResponseField(name) {
            case .deliveryID: deliveryID = deliveryID ?? value
            case .retryAfter: retryAfter = retryAfter ?? value
            // Only the broadcast channel API sends it (with 201, on creation).
            case .channelID: channelID = channelID ?? value
            case nil: break
            }
        }
        // An error's reason is parsed whether or not the body is kept: the broadcast channel API keeps its
        // bodies (they carry data on success) and still answers errors in this shape.
        let parsed = (200..<300).contains(status) ? APNsResponseBody() : APNsResponseBody.parse(body)
        return ProviderResponse(
            status: status, reason: parsed.reason, timestampMilliseconds: parsed.timestampMilliseconds,
            apnsID: deliveryID.flatMap { UUID(apnsIDString: $0) }, retryAfter: status == 200 ? nil : retryAfter,
            channelID: channelID, body: keepsBody ? body : [])
    }

    public var responseHeaderNames: [String] { ["apns-id", "retry-after", "apns-channel-id"] }

    public func goAwayReason(debugData: String) -> String? {
        debugData.isEmpty ? nil : APNsResponseBody.parse(Array(debugData.utf8)).reason
    }

    public func retiresConnection(_ response: ProviderResponse) -> Bool {
        response.retiresConnection
    }

    public func tokenRejectionReason(_ response: ProviderResponse, credentials: ProviderCredentials) -> String? {
        guard case .token = credentials else { return nil }
        return response.apnsProviderTokenRejection
    }

    public func startsWithSingleStream(_ credentials: ProviderCredentials) -> Bool {
        if case .token = credentials { return true }
        return false
    }

    public func tlsRefusalReason(_ refusal: TLSRefusal) -> String {
        let text = switch refusal {
        case .serverNotTrusted: "the APNs server's certificate did not verify (check --apns-endpoint and --apns-ca-file)"
        case .serverNameMismatch: "the APNs server's certificate does not name its host (check --apns-endpoint)"
        case .certificateExpired: "APNs refused the client certificate as expired"
        case .certificateRevoked: "APNs refused the client certificate as revoked"
        case .unknownIssuer: "APNs does not know the client certificate's issuer"
        case .certificateRefused: "APNs refused the client certificate"
        case .certificateRequired: "APNs requires a client certificate"
        case .accessDenied: "APNs denied access to the client certificate"
        case .handshakeRefused: "APNs refused the TLS handshake"
        case .noSharedCipher: "no TLS cipher in common with the APNs server"
        case .noSharedVersion: "no TLS version in common with the APNs server"
        case .notTLS: "the APNs endpoint does not speak TLS"
        }
        return "\(refusal.code): \(text)"
    }
}

/// The response headers APNs' rules read. HTTP/2 names are lowercase on the wire (RFC 9113 §8.2.1), so the
/// exact comparison almost always decides; header validation is off, so an uppercase spelling is still read.
enum APNsResponseField {
    case deliveryID, retryAfter, channelID

    init?(_ name: String) {
        switch name {
        case "apns-id": self = .deliveryID
        case "retry-after": self = .retryAfter
        case "apns-channel-id": self = .channelID
        default:
            guard HTTP2HeaderName.hasUppercase(name) else { return nil }
            self.init(name.lowercased())
        }
    }
}
