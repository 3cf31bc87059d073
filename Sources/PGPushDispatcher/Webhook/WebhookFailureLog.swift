/// When the relay says in its log that the receiver fails, and when that it answers again. Pure: the caller
/// passes the time.
///
/// A receiver that is down fails every attempt at the same event, retried forever: the first failure is logged
/// at once, with its status or error; a different failure at once too; the same one again at most every
/// `reportEvery`, with the number of attempts so far; and the first delivery after failures once, with how many
/// attempts and how long it took.
public struct WebhookFailureLog: Sendable, Hashable {
    public typealias Instant = ContinuousClock.Instant

    /// What the caller should log.
    public enum Report: Sendable, Hashable {
        /// Event `eventID` failed with `problem`; `attempts` so far, failing since `since`.
        case failing(eventID: Int64, problem: String, attempts: Int, since: Instant)
        /// Event `eventID` was delivered after `attempts` attempts, the receiver having failed for `after`.
        case recovered(eventID: Int64, attempts: Int, after: Duration)
    }

    public var reportEvery: Duration
    public private(set) var problem: String?
    private var since: Instant?
    private var attempts = 0
    private var lastReport: Instant?

    public init(reportEvery: Duration = .seconds(30)) {
        self.reportEvery = reportEvery
    }

    /// An attempt at `eventID` failed with `problem` (`HTTP 500`, `no answer within 10 s`, …).
    public mutating func failed(eventID: Int64, problem: String, at now: Instant) -> Report? {
        attempts += 1
        if since == nil { since = now }
        if self.problem != problem {
            self.problem = problem
            lastReport = now
            return .failing(eventID: eventID, problem: problem, attempts: attempts, since: since ?? now)
        }
        if let lastReport, lastReport.duration(to: now) < reportEvery { return nil }
        lastReport = now
        return .failing(eventID: eventID, problem: problem, attempts: attempts, since: since ?? now)
    }

    /// `eventID` was delivered: `.recovered` when attempts had failed before it.
    public mutating func delivered(eventID: Int64, at now: Instant) -> Report? {
        defer {
            problem = nil
            since = nil
            attempts = 0
            lastReport = nil
        }
        guard attempts > 0, let since else { return nil }
        return .recovered(eventID: eventID, attempts: attempts + 1, after: since.duration(to: now))
    }

    /// Failed attempts since the last delivery.
    public var failedAttempts: Int { attempts }
}
