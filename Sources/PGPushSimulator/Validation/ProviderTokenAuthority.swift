import Crypto
import Foundation
import PGPushCore
import Synchronization

/// Verifies provider tokens like APNs: signature by a known team key, age, and how often a team mints new ones.
///
/// A JWT string's signature is verified once and the result cached, because the same token arrives on every
/// request for up to an hour.
final class ProviderTokenAuthority: Sendable {
    enum Result: Sendable, Hashable {
        case accepted(keyID: String, issuedAt: Int64)
        case rejected(status: Int, reason: String)
    }

    private enum Verification: Sendable {
        case valid(teamKey: String, keyID: String, issuedAt: Int64)
        case invalid
    }

    private struct RefreshState {
        var acceptedTokens: Set<String> = []
        var distinctTokens: Set<String> = []
        var lastNewTokenAt: Date
    }

    private struct State {
        var verified: [String: Verification] = [:]
        var refresh: [String: RefreshState] = [:]
    }

    private let keys: [String: P256.Signing.PublicKey]
    private let state = Mutex(State())
    private let minimumRefreshInterval: TimeInterval
    private let maximumAge: TimeInterval
    private let statistics: SimulatorStatisticsRecorder
    private static let cacheLimit = 10_000

    init(configuration: APNsSimulatorConfiguration, statistics: SimulatorStatisticsRecorder) {
        var keys: [String: P256.Signing.PublicKey] = [:]
        for key in configuration.tokenKeys { keys[Self.teamKey(key.teamID, key.keyID)] = key.publicKey }
        self.keys = keys
        self.minimumRefreshInterval = configuration.providerTokenMinimumRefreshInterval.inSeconds
        self.maximumAge = configuration.providerTokenMaximumAge.inSeconds
        self.statistics = statistics
    }

    static func teamKey(_ teamID: String, _ keyID: String) -> String { "\(teamID).\(keyID)" }

    /// Checks a bearer token. `boundKeyID` is the key the connection first used, if any.
    func authenticate(jwt: String, boundKeyID: String?, now: Date) -> Result {
        let verification = verify(jwt)
        guard case .valid(let teamKey, let keyID, let issuedAt) = verification else {
            return .rejected(status: 403, reason: "InvalidProviderToken")
        }
        if isExpired(issuedAt: issuedAt, now: now) {
            return .rejected(status: 403, reason: "ExpiredProviderToken")
        }
        if let boundKeyID, boundKeyID != keyID {
            return .rejected(status: 403, reason: "UnrelatedKeyIdInToken")
        }
        let (tooSoon, distinct): (Bool, Int) = state.withLock { state in
            var refresh = state.refresh[teamKey] ?? RefreshState(lastNewTokenAt: .distantPast)
            defer { state.refresh[teamKey] = refresh }
            refresh.distinctTokens.insert(jwt)
            if refresh.acceptedTokens.contains(jwt) { return (false, refresh.distinctTokens.count) }
            if now.timeIntervalSince(refresh.lastNewTokenAt) < minimumRefreshInterval {
                return (true, refresh.distinctTokens.count)
            }
            refresh.acceptedTokens.insert(jwt)
            refresh.lastNewTokenAt = now
            return (false, refresh.distinctTokens.count)
        }
        statistics.update {
            $0.distinctProviderTokens[teamKey] = distinct
            if tooSoon { $0.tooManyProviderTokenUpdatesSent += 1 }
        }
        if tooSoon { return .rejected(status: 429, reason: "TooManyProviderTokenUpdates") }
        return .accepted(keyID: keyID, issuedAt: issuedAt)
    }

    func isExpired(issuedAt: Int64, now: Date) -> Bool {
        now.timeIntervalSince1970 - Double(issuedAt) > maximumAge
    }

    private func verify(_ jwt: String) -> Verification {
        if let cached = state.withLock({ $0.verified[jwt] }) { return cached }
        let result: Verification
        if let parsed = ParsedProviderToken(jwt[...]),
           let key = keys[Self.teamKey(parsed.teamID, parsed.keyID)],
           parsed.isSigned(by: key) {
            result = .valid(teamKey: Self.teamKey(parsed.teamID, parsed.keyID), keyID: parsed.keyID,
                            issuedAt: parsed.issuedAt)
        } else {
            result = .invalid
        }
        state.withLock { state in
            if state.verified.count >= Self.cacheLimit { state.verified.removeAll(keepingCapacity: true) }
            state.verified[jwt] = result
        }
        return result
    }
}
