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
