/// Whether a worker is alive in the sense that matters to a supervisor: it still reaches PostgreSQL, and its
/// claim loop still turns. A process that runs but does neither holds leases it cannot renew and sends
/// nothing; `/healthz` answers 503 so the supervisor restarts it. Pure: the caller passes the time.
public struct WorkerHealth: Sendable, Hashable {
    public typealias Instant = ContinuousClock.Instant

    /// How long without a successful database call before the worker counts as cut off.
    public var databaseWindow: Duration
    /// How long the claim loop may go without an iteration (it wakes at least every poll interval).
    public var loopWindow: Duration
    public private(set) var lastDatabaseContact: Instant
    public private(set) var lastLoopIteration: Instant

    public init(databaseWindow: Duration, loopWindow: Duration, now: Instant) {
        self.databaseWindow = databaseWindow
        self.loopWindow = loopWindow
        self.lastDatabaseContact = now
        self.lastLoopIteration = now
    }

    public mutating func databaseAnswered(at now: Instant) {
        lastDatabaseContact = max(lastDatabaseContact, now)
    }

    public mutating func loopTurned(at now: Instant) {
        lastLoopIteration = max(lastLoopIteration, now)
    }

    public func isHealthy(at now: Instant) -> Bool {
        lastDatabaseContact.duration(to: now) <= databaseWindow && lastLoopIteration.duration(to: now) <= loopWindow
    }
}

/// Whether a worker is ready (`/readyz`), and if not, why: the first reason that applies, in the order a
/// supervisor can act on them. Pure: the worker passes what it knows.
///
/// Ready means the worker can do its work: it has registered and its last write reached PostgreSQL, it is not
/// draining, and the providers are reachable through the HTTP proxy, if it uses one (while tunnels fail, it
/// would only spend attempts).
public enum WorkerReadiness {
    /// `nil` when ready, else a sentence for `/readyz`'s body.
    /// - Parameters:
    ///   - databaseAnswered: registered, and the last claim or result write succeeded.
    ///   - databaseProblem: the database's availability problem, if its last answer showed one.
    ///   - draining: a graceful shutdown has started.
    ///   - proxyProblem: why provider tunnels through the HTTP proxy fail (``HTTPProxyStatus/problem``).
    public static func notReadyReason(
        databaseAnswered: Bool, databaseProblem: String?, draining: Bool, proxyProblem: String?
    ) -> String? {
        if draining { return "draining: a graceful shutdown is under way" }
        if let databaseProblem { return databaseProblem }
        if !databaseAnswered { return "the database has not taken the worker's registration or last write yet" }
        if let proxyProblem { return "providers unreachable: \(proxyProblem)" }
        return nil
    }
}
