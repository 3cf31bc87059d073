/// Decides what pgpush does with one APNs outcome.
///
/// Responses are looked up by (status, reason) in ``APNsReasonTable``. A reason that is not in the
/// table (Apple adds reasons from time to time) falls back to its status family:
///
/// | status | unknown or missing reason |
/// |---|---|
/// | 200 | `.delivered` |
/// | 403, 404, 405 | `.configurationError`: credential or client bug, pause rather than burn tokens |
/// | 410 | `.tokenDead` |
/// | 429 | `.retryLater(reconnect: false)` |
/// | other 4xx | `.permanentFailure` for this message |
/// | 5xx | `.retryLater(reconnect: false)` |
/// | anything else | `.configurationError`: pgpush is not talking to APNs (a proxy, a wrong host) |
///
/// A missing reason is recorded as `"HTTP<status>"`.
public func classify(_ outcome: ProviderOutcome) -> DeliveryClass {
    switch outcome {
    case .response(let response):
        return classifyResponse(response)
    case .noResponse(let reason):
        return classifyNoResponse(reason)
    }
}

private func classifyResponse(_ response: ProviderResponse) -> DeliveryClass {
    let status = response.status
    if status == 200 {
        return .delivered
    }
    let reason = response.reason ?? "HTTP\(status)"
    if let known = APNsReasonTable.entries[APNsReasonTable.Key(status: status, reason: reason)] {
        return known.deliveryClass(reason: reason, timestampMilliseconds: response.timestampMilliseconds)
    }
    switch status {
    case 403, 404, 405:
        return .configurationError(reason: reason)
    case 410:
        return .tokenDead(reason: reason, timestampMilliseconds: response.timestampMilliseconds)
    case 429:
        return .retryLater(reason: reason, reconnect: false)
    case 400..<500:
        return .permanentFailure(reason: reason)
    case 500..<600:
        return .retryLater(reason: reason, reconnect: false)
    default:
        return .configurationError(reason: response.reason ?? "UnexpectedStatus\(status)")
    }
}

/// Like ``classify(_:)``, for a request sent to `topic` on behalf of an app whose own topic is `appTopic`.
/// `TopicDisallowed` for a suffixed topic (`.voip`, `.complication`, `.push-type.liveactivity`, …) means the
/// credential does not cover that push type: the job fails, while the app's other jobs go on. For the app's
/// own topic it stays a configuration error that pauses the app.
public func classify(_ outcome: ProviderOutcome, topic: String, appTopic: String) -> DeliveryClass {
    let classification = classify(outcome)
    if case .configurationError(let reason) = classification, reason == "TopicDisallowed", topic != appTopic {
        return .jobError(reason: reason)
    }
    return classification
}

/// Stable reason strings for outcomes without an HTTP response; they are what `push.deliveries.reason` holds.
public enum NoResponseReasonText {
    public static let goAway = "GoAway"
    public static let refusedStream = "RefusedStream"
    public static let connectionClosed = "ConnectionClosed"
    public static let missingStatus = "MissingStatus"
    public static let timeout = "Timeout"
    public static let connectFailed = "ConnectFailed"
}

private func classifyNoResponse(_ reason: ProviderNoResponseReason) -> DeliveryClass {
    switch reason {
    case .goAwayNotProcessed(let debugReason):
        // GOAWAY debug data carries the same reasons as response bodies. A credential or topic error
        // there must pause the app like the response would; anything else just means "re-send elsewhere".
        if let debugReason, let entry = APNsReasonTable.entry(forReason: debugReason) {
            switch entry {
            case .configurationError:
                return .configurationError(reason: debugReason)
            case .refreshProviderToken:
                return .refreshProviderTokenAndRetry(reason: debugReason)
            case .providerTokenStorm:
                return .retryLater(reason: debugReason, reconnect: true)
            default:
                break
            }
        }
        return .retryLater(reason: NoResponseReasonText.goAway, reconnect: true)
    case .refusedStream:
        // The stream was refused, the connection is fine.
        return .retryLater(reason: NoResponseReasonText.refusedStream, reconnect: false)
    case .connectionClosed:
        return .retryLater(reason: NoResponseReasonText.connectionClosed, reconnect: true)
    case .missingStatus:
        // A protocol violation: do not trust that connection any more.
        return .retryLater(reason: NoResponseReasonText.missingStatus, reconnect: true)
    case .timeout:
        // One slow stream does not prove the connection dead; PING decides that. Reconnecting on
        // every request deadline would churn connections under load, which APNs treats as abuse.
        return .retryLater(reason: NoResponseReasonText.timeout, reconnect: false)
    case .connectFailed:
        // The detail may hold host names or TLS internals; the record gets the stable text only.
        return .retryLater(reason: NoResponseReasonText.connectFailed, reconnect: true)
    case .tlsRejected(let reason), .credentialRefused(let reason):
        // Retrying would spend every token's attempts on the same refusal: pause the app with the reason.
        return .configurationError(reason: reason)
    case .notSent(let reason):
        return .permanentFailure(reason: reason)
    }
}
