extension DeliveryClass {
    /// The text stored in `push.deliveries.reason`; `nil` for `.delivered`.
    public var reasonForRecord: String? {
        switch self {
        case .delivered: nil
        case .tokenDead(let reason, _): reason
        case .tokenWrongForTopicOrEnvironment(let reason): reason
        case .retryLater(let reason, _): reason
        case .refreshProviderTokenAndRetry(let reason): reason
        case .configurationError(let reason): reason
        case .permanentFailure(let reason): reason
        case .jobError(let reason): reason
        }
    }

    /// Whether this outcome ends the token's delivery for this job. `false` for `.retryLater` and
    /// `.refreshProviderTokenAndRetry`, which send the token again.
    ///
    /// `.configurationError` is final for the token that received it; the worker additionally pauses
    /// the app and gives back the tokens it has not sent.
    public var isFinal: Bool {
        switch self {
        case .retryLater, .refreshProviderTokenAndRetry: false
        case .delivered, .tokenDead, .tokenWrongForTopicOrEnvironment, .configurationError, .permanentFailure, .jobError: true
        }
    }

    /// `true` for 429 `TooManyProviderTokenUpdates`. It is classified `.retryLater` like any 429, but it
    /// means provider tokens are being minted too often (usually processes not sharing one token):
    /// callers must not mint again because of it, and should raise an alert.
    public var isProviderTokenUpdateStorm: Bool {
        if case .retryLater(let reason, _) = self {
            return reason == APNsReasonTable.tooManyProviderTokenUpdates
        }
        return false
    }
}
