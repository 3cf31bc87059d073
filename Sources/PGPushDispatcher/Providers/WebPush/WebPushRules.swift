import Foundation
import NIOHPACK
import PGPushCore
import PGPushTransport

/// A push service's rules for a pool to one Web Push origin (``WebPushOriginPools``): an answer's reason is what
/// its body says in a few words (Apple's `{"reason": "BadJwtToken"}`), `Retry-After` is read as seconds or an
/// HTTP date, nothing retires a connection, and there is no token for the pool to renew: VAPID is in each
/// request's own header block. A TLS refusal is not a pause: an origin comes from a browser, and one origin
/// refusing says nothing of the app, so its requests are retried like any that got no answer.
struct WebPushRules: HTTP2ProviderRules {
    var provider: PushProvider { .webpush }

    var description: String { PushProvider.webpush.displayName }

    func response(status: Int, headers: HPACKHeaders, body: [UInt8], keepsBody: Bool) -> ProviderResponse {
        guard !(200..<300).contains(status) else { return ProviderResponse(status: status) }
        var retryAfter: Duration?
        for (name, value, _) in headers where name == "retry-after" || name.lowercased() == "retry-after" {
            retryAfter = WebPushClient.retryAfter(value, now: Date())
            break
        }
        return ProviderResponse(
            status: status, reason: WebPushClient.reason(in: body), retryAfter: retryAfter.map { String($0.components.seconds) })
    }

    var responseHeaderNames: [String] { ["retry-after"] }

    func goAwayReason(debugData: String) -> String? { nil }

    func retiresConnection(_ response: ProviderResponse) -> Bool { false }

    func tokenRejectionReason(_ response: ProviderResponse, credentials: ProviderCredentials) -> String? { nil }

    func startsWithSingleStream(_ credentials: ProviderCredentials) -> Bool { false }

    func tlsRefusalReason(_ refusal: TLSRefusal) -> String {
        "\(refusal.code): a push service refused TLS or was not trusted (check --web-push-ca-file for a private origin)"
    }
}
