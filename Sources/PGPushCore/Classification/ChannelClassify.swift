/// What a Live Activity channel management answer (create, read, delete, list) means for the channel's row.
public enum ChannelManagementVerdict: Sendable, Hashable {
    /// A 2xx: the request did what it asked.
    case done
    /// The channel does not exist on APNs (`ChannelNotRegistered`, `BadChannelId`): a delete has nothing
    /// left to do, a read learns the channel is gone.
    case gone(reason: String)
    /// APNs will not do this however often it is asked (`CannotCreateChannelConfig`, `FeatureNotEnabled`,
    /// `TopicDisallowed`, a refused credential, …): the row fails with the reason.
    case refused(reason: String)
    /// Throttled, unavailable, unanswered or a provider token to renew: ask again after a backoff.
    case retry(reason: String)
}

/// Classifies a channel management answer (../shared/LIVE_ACTIVITIES.md, "Errors of the channel and broadcast
/// APIs"). The provider token's own 403s (`ExpiredProviderToken`, `TooManyProviderTokenUpdates`) are retried:
/// the pool hands the rejection to the token's source, and the next request carries a fresh token.
public func classifyChannelManagement(_ outcome: ProviderOutcome) -> ChannelManagementVerdict {
    guard case .response(let response) = outcome else {
        return .retry(reason: classify(outcome).reasonForRecord ?? "NoResponse")
    }
    let reason = response.reason ?? "HTTP\(response.status)"
    switch response.status {
    case 200..<300:
        return .done
    case 400 where reason == "ChannelNotRegistered" || reason == "BadChannelId":
        return .gone(reason: reason)
    case 403 where reason == "ExpiredProviderToken":
        return .retry(reason: reason)
    case 429, 500..<600:
        return .retry(reason: reason)
    default:
        return .refused(reason: reason)
    }
}

/// Classifies the answer to one channel broadcast (`POST /4/broadcasts/apps/<bundle id>`): a job of one
/// request, so a request APNs refuses (`ChannelNotRegistered`, `BadExpirationDate`, `PayloadTooLarge`,
/// `FeatureNotEnabled`, …) fails the job with the reason. Credentials, throttling and unavailability are
/// judged as for any APNs request.
public func classifyBroadcast(_ outcome: ProviderOutcome) -> DeliveryClass {
    if case .response(let response) = outcome, response.status == 400 || response.status == 413 {
        return .jobError(reason: response.reason ?? "HTTP\(response.status)")
    }
    return classify(outcome)
}
