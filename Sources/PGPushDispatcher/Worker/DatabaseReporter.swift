import Logging
import PGPushStore
import Synchronization

/// Where every service reports its database calls' failures and successes: a database outage is logged once
/// for all of them (``DatabaseStatus``), anything else as a warning of the caller's.
final class DatabaseReporter: Sendable {
    private let status = Mutex(DatabaseStatus())
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    /// Why the database is unavailable, from the last answers; nil while it answers.
    var problem: DatabaseProblem? { status.withLock(\.problem) }

    /// Logs a failed call: a database outage once for all services (``failed(_:)``), anything else as a warning
    /// with `message`.
    func report(_ error: any Error, _ message: @autoclosure () -> String, metadata: Logger.Metadata = [:]) {
        guard !failed(error) else { return }
        var metadata = metadata
        metadata["error"] = "\(LoggableError.describe(error))"
        logger.warning("\(message())", metadata: metadata)
    }

    /// Records a failed database call. Returns true when the error shows the database unavailable
    /// (unreachable, read-only, shutting down): then it is logged here, once per problem and at most every few
    /// seconds for all loops together, and the worker reports not ready. Other errors are the caller's to log.
    @discardableResult
    func failed(_ error: any Error) -> Bool {
        guard let problem = DatabaseProblem.of(error) else { return false }
        if let report = status.withLock({ $0.failed(problem, at: .now) }),
           case .unavailable(let problem, let since, let failures) = report {
            logger.error("database unavailable: \(problem); not ready, retrying with backoff", metadata: [
                "for_seconds": "\(Int(since.duration(to: .now).inSeconds))", "failed_calls": "\(failures)",
                "error": "\(LoggableError.describe(error))",
            ])
        }
        return true
    }

    /// Records a write that succeeded (a claim, a heartbeat, a result write: a read proves nothing, since a
    /// standby answers reads); logs the end of an outage once.
    func answered() {
        if let report = status.withLock({ $0.succeeded(at: .now) }), case .recovered(let outage) = report {
            logger.info("database available again; ready", metadata: ["unavailable_seconds": "\(Int(outage.inSeconds))"])
        }
    }
}

/// ``WorkerHealth`` shared by the services that feed it (the claim loop's turns, the heartbeat's answers) and
/// `/healthz`, which reads it.
final class HealthMonitor: Sendable {
    private let health: Mutex<WorkerHealth>

    init(_ health: WorkerHealth) {
        self.health = Mutex(health)
    }

    func loopTurned() { health.withLock { $0.loopTurned(at: .now) } }

    func databaseAnswered() { health.withLock { $0.databaseAnswered(at: .now) } }

    var isHealthy: Bool { health.withLock { $0.isHealthy(at: .now) } }
}

/// The wait before retrying after `failures` failed calls in a row: exponential from 200 ms, capped at 6.4 s,
/// with up to 100 ms of jitter.
enum RetryBackoff {
    static func after(_ failures: Int) -> Duration {
        let capped = min(failures, 6)
        return .milliseconds(Int64(100 * (1 << capped)) + Int64.random(in: 0...100))
    }
}
