import Logging
import PGPushCore
import PGPushStore
import PGPushTransport
import Synchronization

/// What a worker has learned of each push-service origin's HTTP version, and the HTTP/2 pools of those that
/// speak it. An origin is unknown until AsyncHTTPClient's first answer from it tells which version ALPN chose
/// (``learned(_:http2:)``): an origin that answered over HTTP/1.1 stays with AsyncHTTPClient's keep-alive
/// connections; one that answered over HTTP/2 gets an ``HTTP2ConnectionPool`` of its own, shared by every app
/// (VAPID is in each request, not in the connection), whose requests cost a fraction of AsyncHTTPClient's.
///
/// The pools are bounded in number (``Settings/maximumPools``; an origin beyond them stays with
/// AsyncHTTPClient, which speaks HTTP/2 too), closed once idle for ``Settings/idleTimeout``, and closed by
/// ``shutdown()``. An origin whose pool can open no connection is forgotten (``forget(_:pool:)``), so the next
/// message learns its version again: a push service that stopped offering `h2` is reached over HTTP/1.1.
final class WebPushOriginPools: Sendable {
    struct Settings: Sendable {
        /// The most origins with a pool at once. The public push services are a handful of origins.
        var maximumPools = 16
        /// Connections per origin: each carries as many streams as the push service allows (about 100 at
        /// FCM, 1,000 at Apple).
        var connectionsPerPool = 4
        /// A pool nothing was sent through for this long is closed; the origin stays known as HTTP/2.
        var idleTimeout: Duration = .seconds(300)
        /// Extra trust roots (`--web-push-ca-file`); the system's are always kept, verification always on.
        var caFile: String?
        var requestTimeout: Duration = .seconds(10)
        var http2Engine: HTTP2Engine = .default
    }

    private struct Pooled {
        var pool: HTTP2ConnectionPool
        var runID: Int
        var lastUsed: ContinuousClock.Instant
    }

    private struct State {
        var http1: Set<WebPushOrigin> = []
        var http2: Set<WebPushOrigin> = []
        var pools: [WebPushOrigin: Pooled] = [:]
        /// Origins whose pool is being made (its TLS context loads the trust roots, out of the lock).
        var making: Set<WebPushOrigin> = []
        /// Every pool's `run()`, until it returns: ``shutdown()`` waits for them.
        var runs: [Int: Task<Void, Never>] = [:]
        var nextRunID = 0
        var closed = false
    }

    let settings: Settings
    private let state = Mutex(State())
    private let logger: Logger
    /// Closes idle pools every ``sweepInterval``.
    private let sweeper: Mutex<Task<Void, Never>?> = Mutex(nil)

    init(settings: Settings, logger: Logger) {
        self.settings = settings
        self.logger = logger
        let interval = Self.sweepInterval(settings.idleTimeout)
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                self?.closeIdlePools()
            }
        }
        sweeper.withLock { $0 = task }
    }

    static func sweepInterval(_ idleTimeout: Duration) -> Duration {
        max(min(idleTimeout / 4, .seconds(30)), .milliseconds(10))
    }

    /// How a message to `origin` goes now.
    enum Route {
        /// Through this origin's pool.
        case http2(HTTP2ConnectionPool)
        /// Through AsyncHTTPClient: the origin speaks HTTP/1.1 only, is not known yet, or has no pool.
        case asyncHTTPClient
    }

    func route(to origin: WebPushOrigin) -> Route {
        state.withLock { state in
            guard state.pools[origin] != nil else { return .asyncHTTPClient }
            state.pools[origin]!.lastUsed = .now
            return .http2(state.pools[origin]!.pool)
        }
    }

    /// Whether `origin` answered over HTTP/1.1 (ALPN gave no `h2`).
    func isHTTP1(_ origin: WebPushOrigin) -> Bool {
        state.withLock { $0.http1.contains(origin) }
    }

    /// The pools running now, for tests and metrics.
    var pooledOrigins: [WebPushOrigin] {
        state.withLock { $0.pools.keys.sorted() }
    }

    /// AsyncHTTPClient's answer from `origin` came over HTTP/2 (`http2`) or HTTP/1.1: remembered, and an HTTP/2
    /// origin gets its pool if there is room (the least recently used pool with nothing in flight makes room).
    func learned(_ origin: WebPushOrigin, http2: Bool) {
        let mustMake = state.withLock { state -> Bool in
            if http2 {
                state.http1.remove(origin)
                state.http2.insert(origin)
            } else {
                state.http2.remove(origin)
                state.http1.insert(origin)
            }
            guard http2, !state.closed, state.pools[origin] == nil, !state.making.contains(origin) else { return false }
            if state.pools.count >= settings.maximumPools {
                let spare = state.pools.filter { Self.isQuiet($0.value.pool) }.min { $0.value.lastUsed < $1.value.lastUsed }
                guard let spare else { return false }
                Self.retire(spare.key, in: &state)
            }
            state.making.insert(origin)
            return true
        }
        if mustMake { makePool(origin) }
    }

    /// The pool of `origin` could open no connection: it is closed and the origin's version forgotten.
    func forget(_ origin: WebPushOrigin, pool: HTTP2ConnectionPool) {
        state.withLock { state in
            guard let pooled = state.pools[origin], pooled.pool === pool else { return }
            state.http2.remove(origin)
            Self.retire(origin, in: &state)
        }
        logger.info("Web Push origin's HTTP/2 connections failed; its version is learned again", metadata: ["origin": "\(origin)"])
    }

    /// Closes the pools nothing was sent through for the idle timeout.
    func closeIdlePools(now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            for (origin, pooled) in state.pools where now - pooled.lastUsed >= settings.idleTimeout && Self.isQuiet(pooled.pool) {
                Self.retire(origin, in: &state)
            }
        }
    }

    /// Closes every pool and waits until each has closed its connections. Nothing is pooled after it.
    func shutdown() async {
        sweeper.withLock { $0?.cancel() }
        let runs = state.withLock { state in
            state.closed = true
            for origin in Array(state.pools.keys) { Self.retire(origin, in: &state) }
            return Array(state.runs.values)
        }
        for run in runs { await run.value }
    }

    private func makePool(_ origin: WebPushOrigin) {
        var configuration = HTTP2ClientConfiguration(endpoint: Self.endpoint(of: origin), provider: WebPushRules())
        configuration.additionalTrustRootsPEMFile = settings.caFile
        configuration.connectionsPerPool = settings.connectionsPerPool
        configuration.requestTimeout = settings.requestTimeout
        configuration.connectTimeout = min(settings.requestTimeout, .seconds(10))
        configuration.maximumResponseBodyBytes = WebPushClient.maximumAnswerBytes
        configuration.http2Engine = settings.http2Engine
        let pool: HTTP2ConnectionPool?
        do {
            pool = try HTTP2ConnectionPool(configuration: configuration, credentials: .none, logger: logger)
        } catch {
            // The CA file was read when the client was made: only a file changed since gets here.
            logger.warning("no HTTP/2 pool for a Web Push origin; it stays with the HTTP/1.1 client", metadata: [
                "origin": "\(origin)", "error": "\(LoggableError.describe(error))"])
            pool = nil
        }
        state.withLock { state in
            state.making.remove(origin)
            guard let pool, !state.closed, state.http2.contains(origin) else { return }
            let runID = state.nextRunID
            state.nextRunID += 1
            state.pools[origin] = Pooled(pool: pool, runID: runID, lastUsed: .now)
            state.runs[runID] = Task {
                try? await pool.run()
                self.state.withLock { _ = $0.runs.removeValue(forKey: runID) }
            }
        }
    }

    /// Cancelling a pool's run closes its connections (the caller has made sure nothing is in flight, or the
    /// worker is stopping); its task leaves ``State/runs`` when they are closed.
    private static func retire(_ origin: WebPushOrigin, in state: inout State) {
        guard let pooled = state.pools.removeValue(forKey: origin) else { return }
        state.runs[pooled.runID]?.cancel()
    }

    private static func isQuiet(_ pool: HTTP2ConnectionPool) -> Bool {
        let statistics = pool.statistics
        return statistics.streamsInFlight == 0 && statistics.callersWaiting == 0
    }

    /// Where a pool to `origin` connects: its host without the brackets an IPv6 origin is written with.
    static func endpoint(of origin: WebPushOrigin) -> ProviderEndpoint {
        var host = Substring(origin.host)
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return ProviderEndpoint(host: String(host), port: origin.port)
    }
}
