/// What pgpush does with one APNs outcome. Produced by ``classify(_:)``.
public enum DeliveryClass: Sendable, Hashable {
    /// 200: the notification was accepted.
    case delivered
    /// 410 `Unregistered` / `ExpiredToken`: prune the device unless it re-registered after `timestampMilliseconds`.
    case tokenDead(reason: String, timestampMilliseconds: Int64?)
    /// 400 `BadDeviceToken` / `DeviceTokenNotForTopic`: the token is wrong for this topic or environment.
    case tokenWrongForTopicOrEnvironment(reason: String)
    /// 429, 5xx, or a connection-level failure: try this token again later. `reconnect` asks for a fresh connection.
    case retryLater(reason: String, reconnect: Bool)
    /// 403 `ExpiredProviderToken`: mint a new provider token, then retry.
    case refreshProviderTokenAndRetry(reason: String)
    /// Credential or request configuration error: pause the app with `reason`, do not burn through tokens.
    case configurationError(reason: String)
    /// This message can never be delivered to this token: record it as failed.
    case permanentFailure(reason: String)
    /// The job's request is wrong for every token (`InvalidPushType`, `TopicDisallowed` for a suffixed topic,
    /// `BadExpirationDate`, `PayloadTooLarge`, …): after a handful of these the job fails with the reason and
    /// the app's other jobs go on.
    case jobError(reason: String)
}
