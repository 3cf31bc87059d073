import struct Foundation.Date
import struct Foundation.TimeInterval

/// When to mint a new provider token. APNs rejects tokens older than an hour (`ExpiredProviderToken`)
/// and answers minting more often than every 20 minutes with `TooManyProviderTokenUpdates`.
public struct ProviderTokenRefreshPolicy: Sendable, Hashable {
    /// Proactive refresh age: comfortably before APNs' one-hour limit.
    public var refreshAfter: TimeInterval
    /// No token is replaced before this age, even when APNs says it expired.
    public var minimumAge: TimeInterval
    /// A token this old is never used.
    public var maximumAge: TimeInterval

    public init(
        refreshAfter: TimeInterval = 50 * 60,
        minimumAge: TimeInterval = 20 * 60,
        maximumAge: TimeInterval = 60 * 60
    ) {
        self.refreshAfter = refreshAfter
        self.minimumAge = minimumAge
        self.maximumAge = maximumAge
    }

    /// Whether `token` should be replaced before its next use: its age is at least ``refreshAfter``
    /// or at least ``maximumAge``, or it expires soon: within five minutes, or within a tenth of its
    /// lifetime (at least a second) when that is shorter.
    public func needsRefresh(_ token: ProviderToken, now: Date) -> Bool {
        let age = token.age(at: now)
        if let expiresAt = token.expiresAt {
            let lifetime = expiresAt.timeIntervalSince(token.issuedAt)
            if expiresAt.timeIntervalSince(now) <= min(300, max(1, lifetime / 10)) { return true }
        }
        return age >= refreshAfter || age >= maximumAge
    }

    /// Whether `token` may be replaced after APNs rejected it with `ExpiredProviderToken`.
    ///
    /// Rule: yes when its age is at least ``minimumAge`` (or ``maximumAge``, whichever is smaller,
    /// so a token past the maximum can always be replaced). A younger token is kept: APNs calling a
    /// fresh token expired means clocks disagree, and minting again would not fix that; it would only
    /// add `TooManyProviderTokenUpdates` to the problem. The rejected request is retried later, and
    /// once the token reaches ``minimumAge`` it is replaced.
    public func mayReplace(_ token: ProviderToken, now: Date) -> Bool {
        let age = token.age(at: now)
        return age >= minimumAge || age >= maximumAge
    }
}
