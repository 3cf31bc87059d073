import Foundation
import Logging
import PGPushCore
import PGPushStore

/// One provider token per (team, key) for the whole fleet, kept in `push.provider_tokens`.
///
/// Every worker reads the shared token; when it is due for refresh, the first worker to take the row lock
/// mints and stores a new one and the others pick it up. So twenty workers present one token at a time and
/// never trip `TooManyProviderTokenUpdates`. The token is cached in memory and re-read from the database
/// only when the local copy nears its refresh age (or APNs called it expired).
public actor SharedProviderTokenSource: ProviderTokenSource {
    private let signer: ProviderTokenSigner
    private let store: QueueStore
    private let policy: ProviderTokenRefreshPolicy
    private let clock: any WallClock
    private let logger: Logger
    private var cached: ProviderToken?
    private var rejectedAsExpired: ProviderToken?
    /// `cached` while it is not rejected, readable without entering the actor.
    private nonisolated let atHand: ProviderTokenAtHand
    /// The refresh in progress: callers arriving meanwhile wait for it instead of querying again (the actor is
    /// reentrant across the database round trips).
    private let refreshes = SingleFlight<ProviderToken>()

    /// How many tokens this worker minted (the rest of the time it reused the fleet's).
    public private(set) var mintCount = 0

    public init(
        signer: ProviderTokenSigner,
        store: QueueStore,
        policy: ProviderTokenRefreshPolicy = ProviderTokenRefreshPolicy(),
        clock: any WallClock = SystemWallClock(),
        logger: Logger
    ) {
        self.signer = signer
        self.store = store
        self.policy = policy
        self.clock = clock
        self.logger = logger
        self.atHand = ProviderTokenAtHand(policy: policy, clock: clock)
    }

    public func currentToken() async throws -> ProviderToken {
        if let cached, !isDue(cached, now: clock.now()) {
            publish(cached)
            return cached
        }
        return try await refreshes.run { try await self.refresh() }
    }

    private func refresh() async throws -> ProviderToken {
        let now = clock.now()
        // Another worker may already have refreshed it.
        let shared = try await store.sharedProviderToken(teamID: signer.teamID, keyID: signer.keyID)
        if let shared, !isDue(shared, now: now), signer.signed(shared) {
            cached = shared
            publish(shared)
            return shared
        }
        let signer = self.signer
        let policy = self.policy
        let rejected = self.rejectedAsExpired
        let token = try await store.replaceSharedProviderToken(teamID: signer.teamID, keyID: signer.keyID) { current in
            // A token another key file signed under this key id is replaced at once: APNs refuses it, and
            // keeping it would pause the app with InvalidProviderToken after its key file was fixed.
            if let current, signer.signed(current) {
                let replaceBecauseRejected = current == rejected && policy.mayReplace(current, now: now)
                if !policy.needsRefresh(current, now: now) && !replaceBecauseRejected {
                    return current
                }
            }
            return try signer.sign(issuedAt: now)
        }
        if token != shared {
            mintCount += 1
            logger.info("minted provider token", metadata: ["team": "\(signer.teamID)", "key": "\(signer.keyID)"])
        }
        cached = token
        publish(token)
        return token
    }

    public func reportRejected(_ token: ProviderToken, reason: String) async {
        guard reason == "ExpiredProviderToken" else { return }
        rejectedAsExpired = token
        atHand.withdraw(token)
    }

    public nonisolated var tokenAtHand: ProviderToken? { atHand.current }

    private func publish(_ token: ProviderToken) {
        if token != rejectedAsExpired { atHand.publish(token) }
    }

    private func isDue(_ token: ProviderToken, now: Date) -> Bool {
        policy.needsRefresh(token, now: now) || (token == rejectedAsExpired && policy.mayReplace(token, now: now))
    }
}
