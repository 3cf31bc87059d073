import Logging
import PGPushCore
import Synchronization

/// Whether provider connections get through an HTTP proxy, from the outcome of every `CONNECT`, and when to say
/// so in the log. Pure: the caller passes the time.
///
/// A proxy that refuses (407, 403, 502, a closed port) fails every pool's every reconnect at once: operators need
/// one line that names the proxy and its answer, not one per connection attempt. So the first failure is
/// reported at once, later ones at most every ``reportEvery`` (with the latest answer), and the first tunnel to
/// open after the last failing target recovers is reported once, with the outage's length. A target (host and
/// port) counts as unreachable from its last failed tunnel until a tunnel to it opens, or until nothing has
/// tried it for ``forgetAfter`` (its pool was closed).
public struct HTTPProxyReachability: Sendable {
    public typealias Instant = ContinuousClock.Instant

    /// What the caller should log.
    public enum Report: Sendable, Hashable {
        /// Tunnels fail with `problem`, since `since`; `failures` counts the failed attempts.
        case failing(problem: String, since: Instant, failures: Int)
        /// Every target is reachable through the proxy again, after `after`.
        case recovered(after: Duration)
    }

    public var reportEvery: Duration
    public var forgetAfter: Duration
    private var failing: [String: (problem: String, at: Instant)] = [:]
    private var since: Instant?
    private var failures = 0
    private var lastReport: Instant?

    public init(reportEvery: Duration = .seconds(5), forgetAfter: Duration = .seconds(120)) {
        self.reportEvery = reportEvery
        self.forgetAfter = forgetAfter
    }

    /// The most recent problem of a target still unreachable through the proxy; `nil` when none is.
    public func problem(at now: Instant) -> String? {
        failing.values.filter { $0.at.duration(to: now) <= forgetAfter }.max { $0.at < $1.at }?.problem
    }

    /// A tunnel to `target` failed with `problem`; returns what to log, if anything.
    public mutating func tunnelFailed(to target: String, problem: String, at now: Instant) -> Report? {
        forgetStale(at: now)
        if failing.isEmpty {
            since = now
            failures = 0
            lastReport = nil
        }
        failing[target] = (problem, now)
        failures += 1
        if let lastReport, lastReport.duration(to: now) < reportEvery { return nil }
        lastReport = now
        return .failing(problem: problem, since: since ?? now, failures: failures)
    }

    /// A tunnel to `target` opened; returns `.recovered` when it was the last target failing.
    public mutating func tunnelOpened(to target: String, at now: Instant) -> Report? {
        forgetStale(at: now)
        guard failing.removeValue(forKey: target) != nil, failing.isEmpty else { return nil }
        let outage = (since ?? now).duration(to: now)
        since = nil
        failures = 0
        lastReport = nil
        return .recovered(after: outage)
    }

    private mutating func forgetStale(at now: Instant) {
        failing = failing.filter { $0.value.at.duration(to: now) <= forgetAfter }
    }
}

/// The shared, locked ``HTTPProxyReachability`` of one proxy: every pool of a worker reports its tunnels here,
/// and `/readyz` reads ``problem``.
public final class HTTPProxyStatus: Sendable {
    private let state: Mutex<HTTPProxyReachability>

    public init(reportEvery: Duration = .seconds(5), forgetAfter: Duration = .seconds(120)) {
        state = Mutex(HTTPProxyReachability(reportEvery: reportEvery, forgetAfter: forgetAfter))
    }

    /// Why providers are unreachable through the proxy right now (it names the proxy, redacted, and its answer),
    /// or `nil`.
    public var problem: String? {
        state.withLock { $0.problem(at: .now) }
    }

    func tunnelFailed(_ error: HTTPProxyError, logger: Logger) {
        let report = state.withLock { $0.tunnelFailed(to: error.target, problem: error.description, at: .now) }
        guard case .failing(let problem, let since, let failures)? = report else { return }
        logger.error("\(problem); provider connections through the proxy fail, not ready, retrying with backoff", metadata: [
            "proxy": "\(error.proxy)", "proxy_status": "\(error.status)", "target": "\(error.target)",
            "for_seconds": "\(Int(since.duration(to: .now).inSeconds))", "failed_attempts": "\(failures)",
        ])
    }

    func tunnelOpened(proxy: String, target: String, logger: Logger) {
        let report = state.withLock { $0.tunnelOpened(to: target, at: .now) }
        guard case .recovered(let outage)? = report else { return }
        logger.notice("HTTPS proxy \(proxy) tunnels to the providers again; ready", metadata: [
            "proxy": "\(proxy)", "unavailable_seconds": "\(Int(outage.inSeconds))",
        ])
    }
}
