import Foundation

/// Decides what pgpush does with one FCM answer (see FCM.md, "Errors").
///
/// FCM's own `errorCode` (the `FcmError` detail) decides first, then `error.status`, then the HTTP status:
///
/// | errorCode, else status | class |
/// |---|---|
/// | (HTTP 200) | `.delivered`, whatever the body |
/// | `UNREGISTERED` | `.tokenDead`, no timestamp |
/// | `INVALID_ARGUMENT` about the token (field `message.token`, or "not a valid FCM registration token") | `.tokenWrongForTopicOrEnvironment` |
/// | `INVALID_ARGUMENT`, anything else | `.jobError`, reason `INVALID_ARGUMENT <field>` when a field is named |
/// | `SENDER_ID_MISMATCH` | `.tokenWrongForTopicOrEnvironment` |
/// | `QUOTA_EXCEEDED`, `RESOURCE_EXHAUSTED`, `UNAVAILABLE`, `INTERNAL`, `DEADLINE_EXCEEDED` | `.retryLater(reconnect: false)` |
/// | `THIRD_PARTY_AUTH_ERROR`, `APNS_AUTH_ERROR` (its older name) | `.configurationError` |
/// | `UNAUTHENTICATED` | `.refreshProviderTokenAndRetry` |
/// | `PERMISSION_DENIED` | `.configurationError` |
/// | `NOT_FOUND` without `UNREGISTERED` | `.configurationError`: a wrong project id or path, not a dead token |
///
/// An unknown or missing code falls back to the HTTP status:
///
/// | status | class |
/// |---|---|
/// | 400, 413 | `.jobError`: the message is wrong for every token |
/// | 401 | `.refreshProviderTokenAndRetry` |
/// | 403, 404, 405 | `.configurationError`: pause rather than burn tokens |
/// | 429 | `.retryLater(reconnect: false)` |
/// | other 4xx | `.permanentFailure` for this message |
/// | 5xx | `.retryLater(reconnect: false)` |
/// | anything else | `.configurationError`: pgpush is not talking to FCM (a proxy, a wrong host) |
///
/// The recorded reason is the `errorCode` when there is one, else `error.status`, else `HTTP<status>`.
/// `Retry-After` stays on the response (``FCMResponse/retryAfter``) for the retry policy.
public func classify(_ response: FCMResponse) -> DeliveryClass {
    if response.status == 200 {
        return .delivered
    }
    let reason = response.errorCode ?? response.errorStatus ?? "HTTP\(response.status)"
    if let code = response.errorCode, let known = classifyFCMCode(code, reason: reason, response: response) {
        return known
    }
    if let status = response.errorStatus, let known = classifyFCMCode(status, reason: reason, response: response) {
        return known
    }
    switch response.status {
    case 400, 413:
        return .jobError(reason: reason)
    case 401:
        return .refreshProviderTokenAndRetry(reason: reason)
    case 403, 404, 405:
        return .configurationError(reason: reason)
    case 429:
        return .retryLater(reason: reason, reconnect: false)
    case 400..<500:
        return .permanentFailure(reason: reason)
    case 500..<600:
        return .retryLater(reason: reason, reconnect: false)
    default:
        return .configurationError(reason: reason)
    }
}

/// `nil` for a code this table does not know, so the caller falls back to the next source.
private func classifyFCMCode(_ code: String, reason: String, response: FCMResponse) -> DeliveryClass? {
    switch code {
    case "UNREGISTERED":
        return .tokenDead(reason: reason, timestampMilliseconds: nil)
    case "INVALID_ARGUMENT":
        if isAboutTheToken(response) {
            return .tokenWrongForTopicOrEnvironment(reason: reason)
        }
        return .jobError(reason: reasonWithField(reason, response.fieldViolations))
    case "SENDER_ID_MISMATCH":
        return .tokenWrongForTopicOrEnvironment(reason: reason)
    case "QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED":
        return .retryLater(reason: reason, reconnect: false)
    case "THIRD_PARTY_AUTH_ERROR", "APNS_AUTH_ERROR":
        return .configurationError(reason: reason)
    case "UNAUTHENTICATED":
        return .refreshProviderTokenAndRetry(reason: reason)
    case "PERMISSION_DENIED", "NOT_FOUND":
        return .configurationError(reason: reason)
    default:
        return nil
    }
}

/// A bad token is the device's fault and ends that token; any other invalid field is the job's fault, and
/// pruning on it would delete every device the job reaches.
private func isAboutTheToken(_ response: FCMResponse) -> Bool {
    if response.fieldViolations.contains(where: { $0.field == "message.token" }) {
        return true
    }
    guard let message = response.errorMessage else { return false }
    return message.range(of: "not a valid FCM registration token", options: .caseInsensitive) != nil
}

/// `INVALID_ARGUMENT message.android.ttl`: the field tells an operator what to fix. Only a short field path
/// is added; the reason is stored per delivery and must hold no producer data.
private func reasonWithField(_ reason: String, _ violations: [FCMFieldViolation]) -> String {
    let field = violations.lazy.map(\.field).first { field in
        (1...64).contains(field.utf8.count) && field.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".")
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "[") || byte == UInt8(ascii: "]")
        }
    }
    guard let field else { return reason }
    return reason + " " + field
}
