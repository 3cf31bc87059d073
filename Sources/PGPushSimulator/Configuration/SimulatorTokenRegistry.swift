import Foundation

/// Which device tokens the simulated APNs knows as dead, malformed or belonging to another topic.
///
/// Explicit sets serve in-process tests; the prefix rules let a separate process (the CLI simulator) and the
/// producer agree on outcomes without sharing state: a token starting with ``unregisteredPrefix`` is dead, and so on.
/// All tokens are compared in lowercase.
public struct SimulatorTokenRegistry: Sendable {
    /// Tokens answered `410 Unregistered`, with the `timestamp` (ms since the epoch) to report.
    public var unregistered: [String: Int64] = [:]
    /// Tokens answered `400 BadDeviceToken`.
    public var badTokens: Set<String> = []
    /// Tokens registered for exactly one topic; a request for any other topic is `400 DeviceTokenNotForTopic`.
    public var tokenTopics: [String: String] = [:]
    /// Tokens that are valid even when ``badDeviceTokenByDefault`` is set.
    public var validTokens: Set<String> = []
    /// Tokens starting with this are `410 Unregistered`. Default `dead`.
    public var unregisteredPrefix: String? = "dead"
    /// The `timestamp` reported for prefix-matched dead tokens; `nil` means one day before the request. Default `nil`.
    public var unregisteredPrefixTimestampMilliseconds: Int64? = nil
    /// Tokens starting with this are `400 BadDeviceToken`. Default `bad0`.
    public var badDeviceTokenPrefix: String? = "bad0"
    /// Tokens starting with this are `400 DeviceTokenNotForTopic`. Default `0e0e`.
    public var notForTopicPrefix: String? = "0e0e"
    /// Simulates a credential for the wrong environment: every token not listed in ``validTokens`` or
    /// ``tokenTopics`` is `400 BadDeviceToken`. Default `false`.
    public var badDeviceTokenByDefault: Bool = false
    /// Accepted lengths of a device token in hex characters (it must also be even). Default 64...200.
    public var tokenHexLength: ClosedRange<Int> = 64...200

    /// An empty registry with the default prefix rules.
    public init() {}

    /// What the registry says about a well-formed token pushed to a topic.
    public enum Outcome: Sendable, Hashable {
        case valid
        case unregistered(timestampMilliseconds: Int64)
        case badDeviceToken
        case notForTopic
    }

    /// Looks the token up; `token` must already be lowercase hex.
    public func outcome(forToken token: String, topic: String?, now: Date) -> Outcome {
        if let timestamp = unregistered[token] { return .unregistered(timestampMilliseconds: timestamp) }
        if badTokens.contains(token) { return .badDeviceToken }
        if let registeredTopic = tokenTopics[token] {
            return registeredTopic == topic ? .valid : .notForTopic
        }
        if let prefix = unregisteredPrefix, !prefix.isEmpty, token.hasPrefix(prefix) {
            let timestamp = unregisteredPrefixTimestampMilliseconds
                ?? Int64((now.timeIntervalSince1970 - 86_400) * 1000)
            return .unregistered(timestampMilliseconds: timestamp)
        }
        if let prefix = badDeviceTokenPrefix, !prefix.isEmpty, token.hasPrefix(prefix) { return .badDeviceToken }
        if let prefix = notForTopicPrefix, !prefix.isEmpty, token.hasPrefix(prefix) { return .notForTopic }
        if badDeviceTokenByDefault && !validTokens.contains(token) { return .badDeviceToken }
        return .valid
    }
}
