import PGPushStore

/// What the worker knows of its database, from the answers to its statements, and when to say so in the log.
///
/// A failover shows as a burst of failures from every loop at once (claims, writes, heartbeats, maintenance):
/// connections drop, then the old address may answer read-only until a standby is promoted. Operators need one
/// line that says which of those it is, not one per loop and statement, so every loop reports here and this
/// decides: the first failure of a problem is logged at once, a changed problem at once, the same problem
/// again at most every `reportEvery`, and the first success after an outage once, with its length. Pure: the
/// caller passes the time.
public struct DatabaseStatus: Sendable, Hashable {
    public typealias Instant = ContinuousClock.Instant

    /// What the caller should log.
    public enum Report: Sendable, Hashable {
        /// The database is unavailable for this reason, since `since`; `failures` counts the failed calls.
        case unavailable(DatabaseProblem, since: Instant, failures: Int)
        /// The database answers again after being unavailable for `outage`.
        case recovered(after: Duration)
    }

    public var reportEvery: Duration
    public private(set) var problem: DatabaseProblem?
    public private(set) var since: Instant?
    private var failures = 0
    private var lastReport: Instant?

    public init(reportEvery: Duration = .seconds(5)) {
        self.reportEvery = reportEvery
    }

    /// True unless the last answer showed the database unavailable (`/readyz`).
    public var isAvailable: Bool { problem == nil }

    /// A call failed because of `problem`; returns what to log, if anything.
    public mutating func failed(_ problem: DatabaseProblem, at now: Instant) -> Report? {
        failures += 1
        if self.problem != problem {
            let first = self.problem == nil
            self.problem = problem
            if first { since = now }
            lastReport = now
            return .unavailable(problem, since: since ?? now, failures: failures)
        }
        if let lastReport, lastReport.duration(to: now) < reportEvery { return nil }
        lastReport = now
        return .unavailable(problem, since: since ?? now, failures: failures)
    }

    /// A call succeeded; returns `.recovered` the first time after an outage.
    public mutating func succeeded(at now: Instant) -> Report? {
        guard problem != nil else { return nil }
        let outage = (since ?? now).duration(to: now)
        problem = nil
        since = nil
        failures = 0
        lastReport = nil
        return .recovered(after: outage)
    }
}
