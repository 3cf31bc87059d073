import struct Foundation.Date
import Synchronization

/// Where the transport gets provider tokens from. One source per (team id, key id), shared by every
/// connection that uses that key.
public protocol ProviderTokenSource: Sendable {
    /// A token valid for use now.
    func currentToken() async throws -> ProviderToken
    /// Tells the source that APNs rejected `token` with `reason` (e.g. `ExpiredProviderToken`).
    func reportRejected(_ token: ProviderToken, reason: String) async
    /// The token to use now if the source has it at hand without suspending, else `nil` (then the caller
    /// awaits ``currentToken()``). The transport asks once per request, so it must be cheap.
    var tokenAtHand: ProviderToken? { get }
}

extension ProviderTokenSource {
    public var tokenAtHand: ProviderToken? { nil }
}

/// The token a source publishes for ``ProviderTokenSource/tokenAtHand``: readable under a lock, so callers
/// need not enter the source's actor, and never one the refresh policy says is due.
public final class ProviderTokenAtHand: Sendable {
    private let token = Mutex<ProviderToken?>(nil)
    private let policy: ProviderTokenRefreshPolicy
    private let clock: any WallClock

    public init(policy: ProviderTokenRefreshPolicy, clock: any WallClock) {
        self.policy = policy
        self.clock = clock
    }

    /// The published token, unless it is due for refresh.
    public var current: ProviderToken? {
        guard let token = token.withLock({ $0 }), !policy.needsRefresh(token, now: clock.now()) else { return nil }
        return token
    }

    public func publish(_ token: ProviderToken) {
        self.token.withLock { $0 = token }
    }

    /// Takes `rejected` off the fast path (a newer published token stays).
    public func withdraw(_ rejected: ProviderToken) {
        token.withLock { if $0 == rejected { $0 = nil } }
    }
}

/// A provider-token source for one process: mints once, caches, and refreshes per ``ProviderTokenRefreshPolicy``.
///
/// Signing does not suspend, so concurrent callers of ``currentToken()`` never mint twice.
/// A fleet of workers should share one token through the database instead, so N processes do not mint N tokens.
public actor LocalProviderTokenSource: ProviderTokenSource {
    private let signer: ProviderTokenSigner
    private let policy: ProviderTokenRefreshPolicy
    private let clock: any WallClock
    private var cached: ProviderToken?
    private var rejectedAsExpired = false
    /// `cached` while it is not rejected, readable without entering the actor.
    private nonisolated let atHand: ProviderTokenAtHand

    /// How many tokens this source has minted; for metrics and tests.
    public private(set) var mintCount = 0

    public init(
        signer: ProviderTokenSigner,
        policy: ProviderTokenRefreshPolicy = ProviderTokenRefreshPolicy(),
        clock: any WallClock = SystemWallClock()
    ) {
        self.signer = signer
        self.policy = policy
        self.clock = clock
        self.atHand = ProviderTokenAtHand(policy: policy, clock: clock)
    }

    public func currentToken() async throws -> ProviderToken {
        let now = clock.now()
        if let cached {
            let expiredAndReplaceable = rejectedAsExpired && policy.mayReplace(cached, now: now)
            if !policy.needsRefresh(cached, now: now) && !expiredAndReplaceable {
                if !rejectedAsExpired { atHand.publish(cached) }
                return cached
            }
        }
        let token = try signer.sign(issuedAt: now)
        cached = token
        rejectedAsExpired = false
        atHand.publish(token)
        mintCount += 1
        return token
    }

    /// `ExpiredProviderToken` for the cached token makes the next ``currentToken()`` mint a new one,
    /// as soon as ``ProviderTokenRefreshPolicy/mayReplace(_:now:)`` allows. Reports about a token that
    /// was already replaced, and other reasons (credential errors, which a new token cannot fix), are ignored.
    public func reportRejected(_ token: ProviderToken, reason: String) async {
        guard reason == "ExpiredProviderToken", token == cached else { return }
        rejectedAsExpired = true
        atHand.withdraw(token)
    }

    public nonisolated var tokenAtHand: ProviderToken? { atHand.current }
}

/// Thrown by a ``ProviderTokenSource`` when the credential's issuer refused it (an OAuth token endpoint
/// answered `invalid_grant`): no retry can help until the credential is fixed.
public struct CredentialRefusal: Error, Sendable, CustomStringConvertible {
    /// Readable, without any secret.
    public var reason: String

    public init(reason: String) {
        self.reason = reason
    }

    public var description: String { reason }
}
