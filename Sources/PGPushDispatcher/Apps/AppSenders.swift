import PGPushCore
import PGPushStore
import PGPushTransport

/// An app's connections to its provider, as the worker uses them: chunks start batches of requests
/// (``PushBatchSink``), the channel manager sends one request and waits for its answer, the pool supervisor
/// runs it, and the metrics read its counters. ``HTTP2ConnectionPool`` is the production pool;
/// PGPushDispatcherTesting's `FakePushPool` answers in-process.
public protocol PushConnectionPool: PushBatchSink {
    /// Sends one request and returns its answer, or why none came. Never throws.
    func send(_ request: some PushRequest) async -> ProviderOutcome
    /// Keeps the connections until cancelled.
    func run() async throws
    /// The pool's counters, for the worker's metrics.
    var statistics: HTTP2PoolStatistics { get }
}

extension HTTP2ConnectionPool: PushConnectionPool {}

/// Where the worker gets an app's sender (its pool, gate and rate limits) and the apps' throttles. The
/// production source is ``AppRegistry``, which builds a pool per app and provider from the app's row;
/// PGPushDispatcherTesting's `FakeAppSenders` hands out senders around fake pools.
public protocol AppSenders: Sendable {
    /// Checks out the sender of an app's provider and role, or nil when the app cannot be sent to (unknown, or
    /// its credential unusable: the app is then paused). The caller checks it back in when done.
    func checkOutSender(for appID: String, platform: DevicePlatform, role: SenderRole) async -> AppSender?
    /// How fast each throttled app can send now (rate-limit share, 429/503 backoff); read before every claim.
    func throttles() -> [String: AppThrottle]
    /// Re-divides the fleet's rate limits among `count` live workers.
    func setLiveWorkers(_ count: Int) async
    /// Takes the apps' rows as just read: a changed credential, topic or endpoint retires the app's sender, a
    /// changed rate limit reaches its limiter.
    func update(apps: [String: AppRecord]) async
    /// Closes the pools of apps nothing was sent for in `timeout`; returns their ids.
    @discardableResult
    func closeIdlePools(idleFor timeout: Duration, now: ContinuousClock.Instant) async -> [String]
    /// Every pool in use, for metrics.
    func activePools() async -> [(appID: String, provider: String, pool: any PushConnectionPool)]
    /// Closes what the pools share (the Web Push client's connections) once the worker has stopped sending.
    func shutdown() async
}

extension AppSenders {
    public func shutdown() async {}

    func checkOutSender(for appID: String, platform: DevicePlatform = .ios) async -> AppSender? {
        await checkOutSender(for: appID, platform: platform, role: .push)
    }

    @discardableResult
    func closeIdlePools(idleFor timeout: Duration) async -> [String] {
        await closeIdlePools(idleFor: timeout, now: .now)
    }
}

extension AppRegistry: AppSenders {}

extension AppSender {
    /// A sender around `pool`, as a sender source other than ``AppRegistry`` makes one (a test's fake): the
    /// app's rate limit divided among `liveWorkers`, and an adaptive in-flight limit that starts at
    /// `initialInFlight` and grows up to `maximumInFlight`.
    public init(
        app: AppRecord, platform: DevicePlatform = .ios, pool: any PushConnectionPool, liveWorkers: Int = 1,
        initialInFlight: Int = 16, maximumInFlight: Int = 1000
    ) {
        self.init(
            app: app, platform: platform, pool: pool,
            rateLimiter: app.rateLimit.map { RateLimiter(fleetRatePerSecond: Double($0), liveWorkers: liveWorkers) },
            projectQuota: nil, gate: ConcurrencyGate(initial: initialInFlight, maximum: maximumInFlight), fcmTokens: nil)
    }

    /// Records a check-out, as ``AppSenders/checkOutSender(for:platform:role:)`` does before it returns the
    /// sender; ``checkIn()`` ends it.
    public func checkOut() { usage.checkOut() }

    /// Requests this app may have in flight now (the adaptive limit), if 429s or 503s have lowered it.
    public var backoffConcurrency: Int? { gate.backoffLimit }

    /// The app's throttle as this sender sees it: its rate-limit share and its 429/503 backoff.
    public var throttle: AppThrottle {
        AppThrottle(ratePerSecond: app.rateLimit == nil ? nil : rateLimiter?.sharePerSecond, backoffConcurrency: gate.backoffLimit)
    }
}
