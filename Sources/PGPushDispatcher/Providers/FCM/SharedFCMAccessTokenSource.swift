import Foundation
import Logging
import PGPushTransport
import PGPushCore
import PGPushStore
import Synchronization

/// One OAuth 2.0 access token per service account for the whole fleet, kept in `push.provider_tokens`.
///
/// Every worker reads the shared token; when it nears its expiry, the first worker to take the lock exchanges
/// a new assertion at the token endpoint while the others wait, then they all use the new token. So a fleet
/// makes one exchange per token lifetime, not one per worker. A 401 from FCM withdraws the token: the next
/// request gets a fresh one. If a token fetched after a 401 is refused too, ``refreshDidNotHelp`` is set and
/// the app is paused by its sender, since a new token cannot fix that.
public actor SharedFCMAccessTokenSource: ProviderTokenSource {
    private let account: FCMServiceAccount
    private let exchange: FCMTokenExchange
    private let store: QueueStore
    private let policy: ProviderTokenRefreshPolicy
    private let clock: any WallClock
    private let logger: Logger
    private var cached: ProviderToken?
    private var rejected: ProviderToken?
    /// The token fetched because of a rejection; a 401 for it means refreshing does not help.
    private var fetchedAfterRejection: ProviderToken?
    private nonisolated let atHand: ProviderTokenAtHand
    private nonisolated let refusedAfterRefresh = Mutex(false)
    /// The refresh in progress: callers arriving meanwhile wait for it instead of querying again (the actor is
    /// reentrant across the database round trips).
    private let refreshes = SingleFlight<ProviderToken>()

    /// Exchanges this worker made (the rest of the time it used the fleet's token).
    public private(set) var exchangeCount = 0

    public init(account: FCMServiceAccount, exchange: FCMTokenExchange, store: QueueStore,
                policy: ProviderTokenRefreshPolicy = ProviderTokenRefreshPolicy(),
                clock: any WallClock = SystemWallClock(), logger: Logger) {
        self.account = account
        self.exchange = exchange
        self.store = store
        self.policy = policy
        self.clock = clock
        self.logger = logger
        self.atHand = ProviderTokenAtHand(policy: policy, clock: clock)
    }

    /// Set once FCM refused a token that was fetched because the previous one was refused.
    public nonisolated var refreshDidNotHelp: Bool { refusedAfterRefresh.withLock { $0 } }

    public nonisolated var tokenAtHand: ProviderToken? { atHand.current }

    public func currentToken() async throws -> ProviderToken {
        if let cached, !isDue(cached) {
            if cached != rejected { atHand.publish(cached) }
            return cached
        }
        return try await refreshes.run { try await self.refresh() }
    }

    public func reportRejected(_ token: ProviderToken, reason: String) async {
        // A 401 for a token already replaced (its request was in flight) says nothing about the current one.
        guard reason == ProviderResponse.unauthenticated, token.jwt == cached?.jwt else { return }
        if token == fetchedAfterRejection {
            refusedAfterRefresh.withLock { $0 = true }
        }
        rejected = token
        atHand.withdraw(token)
    }

    private func refresh() async throws -> ProviderToken {
        let rejectedValue = rejected?.jwt
        if let shared = try await store.sharedAccessToken(clientEmail: account.clientEmail, keyID: account.privateKeyID) {
            let token = wrap(shared.token, issuedAt: shared.issuedAt)
            if !policy.needsRefresh(token, now: clock.now()), shared.token.value != rejectedValue {
                return adopt(token, afterRejection: rejectedValue != nil)
            }
        }
        let (account, exchange, logger, policy, clock) = (self.account, self.exchange, self.logger, self.policy, self.clock)
        let exchanged = Mutex(false)
        let chosen: (token: FCMAccessToken, issuedAt: Date)
        do {
            chosen = try await store.replaceSharedAccessToken(clientEmail: account.clientEmail, keyID: account.privateKeyID) { current in
                let now = clock.now()
                // Another worker exchanged while this one waited for the lock: its token is fresh (just issued).
                if let current, current.value != rejectedValue,
                   !policy.needsRefresh(Self.wrap(current, account: account, issuedAt: now), now: now) {
                    return current
                }
                exchanged.withLock { $0 = true }
                return try await exchange.exchange(for: account, now: now, logger: logger)
            }
        } catch let failure as FCMTokenExchange.Failure where failure.kind == .refused {
            throw CredentialRefusal(reason: "FCM access token for \(account.clientEmail): \(failure.reason)")
        }
        if exchanged.withLock({ $0 }) {
            exchangeCount += 1
            logger.info("exchanged a service-account assertion for an FCM access token", metadata: ["client": "\(account.clientEmail)"])
        }
        return adopt(wrap(chosen.token, issuedAt: chosen.issuedAt), afterRejection: rejectedValue != nil)
    }

    /// Takes a new token into use. The rejection state is about the token it replaces: a token fetched
    /// because of a 401 is remembered (a 401 for it too means refreshing does not help); any other adoption
    /// forgets the rejections.
    private func adopt(_ token: ProviderToken, afterRejection: Bool) -> ProviderToken {
        cached = token
        rejected = nil
        fetchedAfterRejection = afterRejection ? token : nil
        refusedAfterRefresh.withLock { $0 = false }
        atHand.publish(token)
        return token
    }

    private func isDue(_ token: ProviderToken) -> Bool {
        token == rejected || policy.needsRefresh(token, now: clock.now())
    }

    private func wrap(_ token: FCMAccessToken, issuedAt: Date) -> ProviderToken {
        Self.wrap(token, account: account, issuedAt: issuedAt)
    }

    /// An access token in the shape the transport takes: `Bearer <token>`, with when it was issued and when it
    /// expires, so the refresh margin is a share of its whole lifetime.
    static func wrap(_ token: FCMAccessToken, account: FCMServiceAccount, issuedAt: Date) -> ProviderToken {
        ProviderToken(jwt: token.value, issuedAt: min(issuedAt, token.expiresAt), teamID: "fcm:" + account.clientEmail,
                      keyID: account.privateKeyID, authorizationScheme: "Bearer", expiresAt: token.expiresAt)
    }
}
