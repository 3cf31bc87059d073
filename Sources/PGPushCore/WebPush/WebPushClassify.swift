/// Decides what pgpush does with one Web Push answer (RFC 8030 §5, and what the public push services send):
///
/// | answer | class | recorded reason |
/// |---|---|---|
/// | 2xx | `.delivered` (recorded as status 200, as every provider's delivery is) | |
/// | 404, 410 | `.tokenDead`: the subscription is gone; the pruner removes it | `NotFound`, `Gone` |
/// | 413 | `.jobError`: the job's message is too large for every subscription | `PayloadTooLarge` |
/// | 401, 403 | `.configurationError`: the app's VAPID key or subject is refused; its Web Push pauses | the answer |
/// | 429 | `.retryLater` after `Retry-After` | `TooManyRequests` |
/// | 5xx, no answer | `.retryLater` with backoff | `HTTP<status>`, or why no answer came |
/// | 400, other 4xx | `.permanentFailure` for this subscription | the answer's reason, else `HTTP<status>` |
/// | not sent | `.permanentFailure` (an endpoint outside the allowed origins) | `EndpointNotAllowed` |
public func classifyWebPush(_ outcome: ProviderOutcome) -> DeliveryClass {
    guard case .response(let response) = outcome else { return classify(outcome) }
    let status = response.status
    switch status {
    case 200..<300:
        return .delivered
    case 404:
        return .tokenDead(reason: "NotFound", timestampMilliseconds: nil)
    case 410:
        return .tokenDead(reason: "Gone", timestampMilliseconds: nil)
    case 413:
        return .jobError(reason: "PayloadTooLarge")
    case 401, 403:
        return .configurationError(reason: WebPushRefusal.pauseReason(status: status, answer: response.reason))
    case 429:
        return .retryLater(reason: "TooManyRequests", reconnect: false)
    case 500..<600:
        return .retryLater(reason: response.reason.map { "HTTP\(status) \($0)" } ?? "HTTP\(status)", reconnect: false)
    default:
        return .permanentFailure(reason: response.reason ?? "HTTP\(status)")
    }
}

/// Why an app's Web Push is paused after a push service refused its requests with 401 or 403.
public enum WebPushRefusal {
    /// The pause reason: the answer quoted, and for Apple's `BadJwtToken`, the subject rule it usually means.
    public static func pauseReason(status: Int, answer: String?) -> String {
        var reason = "Web Push: a push service answered \(status)"
        if let answer { reason += " \(answer)" }
        reason += " to the app's VAPID token"
        if answer == "BadJwtToken" {
            reason += "; Apple refuses a vapid_subject with spaces, angle brackets, localhost, a .local host or no real domain"
        } else {
            reason += "; check vapid_private_key_path, vapid_public_key and vapid_subject"
        }
        return reason
    }

    /// The pause reason of a worker whose VAPID key file does not match the app's `vapid_public_key`.
    public static let keyMismatch =
        "Web Push: the key in vapid_private_key_path does not match vapid_public_key (subscriptions made with the public key would refuse it)"
}
