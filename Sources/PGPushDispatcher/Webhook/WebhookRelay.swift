import Foundation
import Logging
import PGPushCore
import PGPushStore
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// `pgpush webhook`: delivers the events of `push.job_events` to one HTTP receiver, at least once and in order,
/// each POST signed with HMAC-SHA256.
///
/// One event at a time, in id order. An answer that is not 2xx, or none within the request timeout, is tried
/// again with capped exponential backoff and jitter, forever: a later event never overtakes it. The cursor
/// (the relay's row of `push.webhook_cursors`) moves after each 2xx, before the next event is sent, so after a
/// crash at most the event in flight is sent again. Events the filter leaves out move the cursor too.
///
/// It finds new events by polling every ``WebhookConfiguration/pollInterval``; with a listen client, a NOTIFY
/// on `pgpush_job_events` wakes it at once. Through PgBouncer in transaction pooling it needs nothing but single
/// statements. PostgreSQL unavailable: it keeps the event it has, retries with backoff, and goes on where it
/// was, so no event is skipped.
///
/// Graceful shutdown lets the POST in flight finish (within the request timeout) and saves the cursor after
/// it; a backoff or a poll is cut short.
public final class WebhookRelay: Service, Sendable {
    public let configuration: WebhookConfiguration
    let store: WebhookStore
    let listener: PostgresClient?
    let logger: Logger
    /// Ended by NOTIFY or a shutdown: the poll.
    let newEvents = RelayWake()
    /// Ended by a shutdown only: the backoffs after failed attempts and database errors.
    let pause = RelayWake()
    let stopping = StopSignal()
    let database = Mutex(DatabaseStatus())
    /// Other database errors, logged at most every 30 s each.
    let otherErrors = Mutex([String: ContinuousClock.Instant]())
    let deliveredCount = Atomic<Int>(0)

    /// - Parameters:
    ///   - client: every statement; may go through PgBouncer in transaction pooling. Run by the caller.
    ///   - listener: a client for LISTEN only, on a direct or session-pooled URL, run by the caller; nil: the
    ///     relay polls only.
    public init(configuration: WebhookConfiguration, client: PostgresClient, listener: PostgresClient? = nil, logger: Logger) {
        var logger = logger
        logger[metadataKey: "webhook"] = "\(configuration.name)"
        self.configuration = configuration
        self.store = WebhookStore(client: client, logger: logger)
        self.listener = listener
        self.logger = logger
    }

    /// Events this process delivered (2xx).
    public var delivered: Int { deliveredCount.load(ordering: .relaxed) }

    public func run() async throws {
        let sender = try WebhookSender(configuration: configuration, logger: logger)
        do {
            try await withGracefulShutdownHandler {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    if let listener {
                        group.addTask { await self.listen(on: listener) }
                    }
                    defer { group.cancelAll() }
                    try await self.relay(with: sender)
                }
            } onGracefulShutdown: {
                self.stop()
            }
        } catch {
            await sender.shutdown()
            throw error
        }
        await sender.shutdown()
        logger.info("webhook relay stopped", metadata: ["delivered": "\(delivered)"])
    }

    /// Stops after the POST in flight, if any, and its cursor.
    public func stop() {
        stopping.set()
        newEvents.signal()
        pause.signal()
    }

    private var isStopping: Bool { stopping.isSet || Task.isCancelled }

    // MARK: The loop

    private func relay(with sender: WebhookSender) async throws {
        guard var cursor = try await openCursor() else { return }
        var failureLog = WebhookFailureLog(reportEvery: configuration.failureReportEvery)
        var readFailures = 0
        while !isStopping {
            let batch: WebhookBatch
            do {
                batch = try await store.events(after: cursor, filter: configuration.filter, limit: configuration.batchSize)
                readFailures = 0
                databaseAnswered()
            } catch {
                if isStopping { return }
                readFailures += 1
                report(error, "reading events failed; retrying")
                await pause.wait(upTo: Worker.backoff(readFailures))
                continue
            }
            var movedElsewhere = false
            for event in batch.events {
                guard await deliver(event, with: sender, log: &failureLog) else { return }
                switch await save(from: cursor, to: event.id) {
                case .saved:
                    cursor = event.id
                case .movedElsewhere(let actual):
                    cursor = actual
                    movedElsewhere = true
                case .stopped:
                    return
                }
                if movedElsewhere || isStopping { break }
            }
            if isStopping { return }
            if movedElsewhere { continue }
            // Events after the last delivered one that the filter left out.
            if batch.scannedThrough > cursor {
                switch await save(from: cursor, to: batch.scannedThrough) {
                case .saved: cursor = batch.scannedThrough
                case .movedElsewhere(let actual): cursor = actual; continue
                case .stopped: return
                }
            }
            if batch.events.count >= configuration.batchSize { continue }
            await newEvents.wait(upTo: configuration.pollInterval)
        }
    }

    /// Opens (or creates) the cursor; waits out an unavailable database. Nil when stopped first.
    private func openCursor() async throws -> Int64? {
        var failures = 0
        while !isStopping {
            do {
                let (cursor, created) = try await store.openCursor(name: configuration.name)
                databaseAnswered()
                logger.info(created ? "webhook relay started with a new cursor at the newest event" : "webhook relay started", metadata: [
                    "url": "\(configuration.loggableURL)", "after_event": "\(cursor)",
                    "events": "\(configuration.filter.events?.joined(separator: ",") ?? "all")",
                    "apps": "\(configuration.filter.apps?.joined(separator: ",") ?? "all")",
                    "listen": "\(listener == nil ? "no (polling)" : "yes")",
                ])
                return cursor
            } catch {
                if isStopping { return nil }
                // Waiting out an outage is normal (a relay may start before its database); any other error here
                // (no such table, no privilege) is a configuration to fix, and says so at once.
                guard DatabaseProblem.of(error) != nil else {
                    throw PGPushError(.invalidConfiguration, "the webhook cursor could not be opened: \(Self.explain(error))", underlying: error)
                }
                failures += 1
                report(error, "opening the cursor failed; retrying")
                await pause.wait(upTo: Worker.backoff(failures))
            }
        }
        return nil
    }

    /// Sends `event` until a 2xx. False when stopped before one (the event is sent again by the next run).
    private func deliver(_ event: WebhookEvent, with sender: WebhookSender, log failureLog: inout WebhookFailureLog) async -> Bool {
        let message = WebhookMessage(event: event, secret: configuration.secret)
        var generator = SystemRandomNumberGenerator()
        var attempt = 1
        while !isStopping {
            let outcome = await sender.send(message)
            if case .delivered(let status) = outcome {
                deliveredCount.add(1, ordering: .relaxed)
                if case .recovered(let id, let attempts, let after)? = failureLog.delivered(eventID: event.id, at: .now) {
                    logger.info("webhook receiver answers again", metadata: [
                        "event_id": "\(id)", "attempts": "\(attempts)", "failing_seconds": "\(Int(after.inSeconds))",
                    ])
                }
                logger.debug("event delivered", metadata: ["event_id": "\(event.id)", "event": "\(event.event)", "status": "\(status)"])
                return true
            }
            let problem = outcome.problem ?? "unknown"
            if case .failing(let id, let problem, let attempts, let since)? = failureLog.failed(eventID: event.id, problem: problem, at: .now) {
                logger.warning("webhook delivery failed; retrying with backoff", metadata: [
                    "event_id": "\(id)", "problem": "\(problem)", "attempts": "\(attempts)",
                    "failing_seconds": "\(Int(since.duration(to: .now).inSeconds))",
                ])
            }
            attempt += 1
            await pause.wait(upTo: configuration.retryPolicy.delay(beforeAttempt: attempt, using: &generator))
        }
        return false
    }

    private enum Saved {
        case saved
        /// The cursor was not where this relay left it: it stands at the value given now.
        case movedElsewhere(Int64)
        case stopped
    }

    /// Moves the cursor after a delivery; retries until the database takes it. A delivered event is never
    /// sent again because of a database outage: only a crash before this returns repeats it.
    private func save(from: Int64, to: Int64) async -> Saved {
        var failures = 0
        while true {
            do {
                if try await store.advanceCursor(name: configuration.name, from: from, to: to) {
                    databaseAnswered()
                    return .saved
                }
                let actual = try await store.cursor(name: configuration.name)
                databaseAnswered()
                // An update that committed while its answer was lost (the connection closed) looks like this.
                if actual == to { return .saved }
                let resumed: Int64
                if let actual {
                    resumed = actual
                } else {
                    resumed = try await store.openCursor(name: configuration.name).lastEventID
                }
                logger.warning("the cursor was moved by someone else (another relay with the same --name, or an operator); going on after its event", metadata: [
                    "expected": "\(from)", "found": "\(actual.map(String.init) ?? "no row")", "after_event": "\(resumed)",
                ])
                return .movedElsewhere(resumed)
            } catch {
                failures += 1
                report(error, "saving the cursor failed; retrying")
                if stopping.isSet && failures >= 3 || Task.isCancelled {
                    logger.warning("stopped before the cursor was saved: the last delivered event is sent again at the next start", metadata: [
                        "event_id": "\(to)",
                    ])
                    return .stopped
                }
                if stopping.isSet {
                    try? await Task.sleep(for: .milliseconds(300))
                } else {
                    await pause.wait(upTo: Worker.backoff(failures))
                }
            }
        }
    }

    // MARK: LISTEN

    /// LISTEN on `pgpush_job_events`: each notification wakes the poll. Reconnects with backoff; the poll
    /// goes on meanwhile.
    private func listen(on listener: PostgresClient) async {
        var failures = 0
        while !Task.isCancelled {
            do {
                try await listener.withConnection { connection in
                    try await connection.listen(on: WebhookStore.eventsChannel) { notifications in
                        failures = 0
                        // Whatever was committed while no LISTEN stood is read now.
                        self.newEvents.signal()
                        for try await _ in notifications {
                            self.newEvents.signal()
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                failures += 1
                if failures == 1 || failures % 20 == 0 {
                    logger.warning("LISTEN failed; polling every \(configuration.pollInterval) until it is back", metadata: [
                        "error": "\(LoggableError.describe(error))",
                    ])
                }
                try? await Task.sleep(for: Worker.backoff(failures))
            }
        }
    }

    // MARK: Reporting

    /// Logs a failed database call: an outage once per problem and at most every few seconds (as the worker
    /// does), anything else at most every 30 s per message.
    private func report(_ error: any Error, _ message: String) {
        if let problem = DatabaseProblem.of(error) {
            if let report = database.withLock({ $0.failed(problem, at: .now) }),
               case .unavailable(let problem, let since, let failures) = report {
                logger.error("database unavailable: \(problem); retrying with backoff", metadata: [
                    "for_seconds": "\(Int(since.duration(to: .now).inSeconds))", "failed_calls": "\(failures)",
                    "error": "\(LoggableError.describe(error))",
                ])
            }
            return
        }
        let described = LoggableError.describe(error)
        let now = ContinuousClock.now
        let due = otherErrors.withLock { last -> Bool in
            let key = message + described
            if let previous = last[key], previous.duration(to: now) < .seconds(30) { return false }
            last[key] = now
            return true
        }
        if due { logger.warning("\(message)", metadata: ["error": "\(described)"]) }
    }

    private func databaseAnswered() {
        if let report = database.withLock({ $0.succeeded(at: .now) }), case .recovered(let outage) = report {
            logger.info("database available again", metadata: ["unavailable_seconds": "\(Int(outage.inSeconds))"])
        }
    }

    /// A database error at start, with what to do about the usual ones.
    static func explain(_ error: any Error) -> String {
        let described = LoggableError.describe(error)
        guard let state = (error as? PSQLError)?.serverInfo?[.sqlState] else { return described }
        switch state {
        case "42P01":
            return described + "; apply the migrations (pgpush migrate) that create push.job_events and push.webhook_cursors"
        case "42501":
            return described + "; grant the relay's login the pgpush_webhook role"
        default:
            return described
        }
    }
}
