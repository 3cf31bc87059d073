import struct Foundation.Date
import struct Foundation.TimeInterval
import Synchronization

/// VAPID tokens for every (key, subject, origin) a process sends to, each signed once and reused until it comes
/// within ``renewalMargin`` of its expiry.
///
/// One token serves every message to an origin: VAPID authenticates requests, and thousands of subscriptions share
/// a handful of origins. The cache is keyed by the key's identity (its `applicationServerKey`), the subject, and
/// the origin, so apps with different keys can share one cache. Time comes from an injected ``WallClock``.
///
/// Thread-safe; lookups take one lock and do not suspend. Signing a new token (an ECDSA signature, tens of
/// microseconds) happens under the lock, so concurrent callers never sign the same token twice.
public final class VAPIDTokenCache: Sendable {
    /// How long a token lives; ``VAPIDSigner/defaultLifetime`` (12 h) unless told otherwise.
    public let lifetime: TimeInterval
    /// How long before its expiry a token is replaced; 1 h by default.
    public let renewalMargin: TimeInterval
    private let clock: any WallClock
    private let state = Mutex(State())

    private struct Key: Hashable {
        var applicationServerKey: String
        var subject: String
        var origin: WebPushOrigin
    }

    private struct State {
        var tokens: [Key: VAPIDToken] = [:]
        var signCount = 0
    }

    /// - Throws: ``WebPushError/Code/invalidVAPIDLifetime`` unless `0 ≤ renewalMargin < lifetime ≤ 24 h`.
    public init(
        clock: any WallClock = SystemWallClock(),
        lifetime: TimeInterval = VAPIDSigner.defaultLifetime,
        renewalMargin: TimeInterval = 3600
    ) throws(WebPushError) {
        guard lifetime >= 1, lifetime <= VAPIDSigner.maximumLifetime, renewalMargin >= 0, renewalMargin < lifetime else {
            throw WebPushError(
                .invalidVAPIDLifetime, field: "lifetime",
                "a VAPID token lifetime must be 1 s to 24 h, and the renewal margin shorter than the lifetime"
            )
        }
        self.clock = clock
        self.lifetime = lifetime
        self.renewalMargin = renewalMargin
    }

    /// The token to send to `origin` with `signer`'s key and subject: the cached one while it is more than
    /// ``renewalMargin`` from its expiry, else a newly signed one.
    ///
    /// A cached token is also replaced when the clock went back so far that its `exp` is more than 24 hours
    /// away, which push services refuse.
    public func token(for origin: WebPushOrigin, signer: VAPIDSigner) throws(WebPushError) -> VAPIDToken {
        let now = clock.now()
        let key = Key(applicationServerKey: signer.key.applicationServerKey, subject: signer.subject.value, origin: origin)
        return try state.withLock { (state) throws(WebPushError) -> VAPIDToken in
            if let cached = state.tokens[key] {
                let remaining = cached.expiresAt.timeIntervalSince(now)
                if remaining > renewalMargin, remaining <= VAPIDSigner.maximumLifetime {
                    return cached
                }
            }
            let token = try signer.sign(audience: origin, now: now, lifetime: lifetime)
            // Drop tokens that have expired, so origins no longer sent to do not accumulate.
            state.tokens = state.tokens.filter { $0.value.expiresAt > now }
            state.tokens[key] = token
            state.signCount += 1
            return token
        }
    }

    /// How many tokens this cache has signed; for metrics and tests.
    public var signCount: Int { state.withLock { $0.signCount } }

    /// How many tokens are cached.
    public var count: Int { state.withLock { $0.tokens.count } }

    /// Forgets every token, e.g. after a push service refused one (403), so the next request signs anew.
    public func removeAll() {
        state.withLock { $0.tokens.removeAll() }
    }
}
