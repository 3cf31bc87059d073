import Foundation
import Logging
import PostgresNIO

/// One row of `push.job_events`: something that happened to a job (or an app), written in the same transaction
/// as the change itself.
public struct JobEvent: Sendable, Hashable {
    /// The event's id. Ids grow in commit order: once id N is seen, no new event below N appears, so the last id
    /// handled is a complete place to resume from (``PGPushClient/events(after:jobID:app:listener:pollInterval:batchSize:)``).
    public var id: Int64
    public var app: String
    /// The job, for a job's event.
    public var jobID: Int64?
    /// When it happened.
    public var at: Date
    public var kind: Kind
    /// What the event says (its counts, its reason), as the database wrote it.
    public var body: JSONValue

    /// `push.job_events.event`.
    public struct Kind: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// A worker took the job (or it ended at once, with an empty audience).
        public static let jobStarted = Kind(rawValue: "job_started")
        /// The job ended with its outcomes; the body has its final counts (`total`, `delivered`, `failed`, …).
        public static let jobDone = Kind(rawValue: "job_done")
        /// The job ended without delivering anything; the body's `failure_reason` says why.
        public static let jobFailed = Kind(rawValue: "job_failed")
        public static let jobCancelled = Kind(rawValue: "job_cancelled")
        /// Cancelled by a newer job with the same replace key, named in the body's `replaced_by`.
        public static let jobReplaced = Kind(rawValue: "job_replaced")
        /// The app was paused; the body has the `reason` and the `provider` it is about (when known).
        public static let appPaused = Kind(rawValue: "app_paused")
        public static let appResumed = Kind(rawValue: "app_resumed")
        /// Devices were pruned: the body's `devices` holds each `token`, `reason`, `job_id` and `user_id`.
        public static let devicesPruned = Kind(rawValue: "devices_pruned")

        /// The job's last event: done, failed, cancelled or replaced.
        public var endsJob: Bool { [Self.jobDone, .jobFailed, .jobCancelled, .jobReplaced].contains(self) }

        public var description: String { rawValue }
    }
}

extension PGPushClient {
    /// The NOTIFY channel the database signals each new event on.
    public static let jobEventsChannel = "pgpush_job_events"

    /// The events of `push.job_events` after the event `id`, oldest first, as they are committed. It never ends by
    /// itself: it waits for new events, and returns `nil` once the task iterating it is cancelled. It throws when
    /// the database refuses the read (a login without `pgpush_producer` or `pgpush_reader`); a read that fails
    /// without an answer from the server (a lost connection) is retried after `pollInterval`.
    ///
    /// It reads the table by id, `batchSize` rows at a time, and skips the rows the filters do not want (other jobs,
    /// other apps; a login with app grants sees only its apps' rows), so following one job reads each newer row
    /// once. When it has read everything, it waits before reading again:
    /// - without a `listener`, for `pollInterval` (polling);
    /// - with a `listener`, until the database NOTIFYs `pgpush_job_events` (once per transaction that wrote
    ///   events) or `pollInterval` passes, whichever comes first: a new event arrives at once, and the poll is the
    ///   backstop. While it waits it LISTENs on that connection, so give it a session of its own (a direct
    ///   connection, or PgBouncer in session pooling), not one behind transaction pooling, and not one lent to
    ///   other work. A listener that fails is logged and the sequence polls instead.
    ///
    /// Ids grow in commit order, so the last id handled is a complete place to resume from, and
    /// ``latestEventID(on:)`` read before an enqueue is a place from which all of that job's events follow.
    ///
    /// - Parameters:
    ///   - id: the last event already handled (0: from the oldest the database keeps).
    ///   - jobID: only this job's events.
    ///   - app: only this app's events.
    public func events(
        after id: Int64 = 0, jobID: Int64? = nil, app: String? = nil, listener: PostgresConnection? = nil,
        pollInterval: Duration = .seconds(1), batchSize: Int = 500
    ) -> JobEvents {
        JobEvents(source: .init(
            client: self, jobID: jobID, app: app, listener: listener, pollInterval: pollInterval,
            batchSize: max(batchSize, 1)), after: id)
    }

    /// The newest event's id (0 when there is none): where to start following events from now on.
    public func latestEventID(on connection: PostgresConnection? = nil) async throws -> Int64 {
        try await value(Int64.self, "SELECT coalesce(max(id), 0)::bigint FROM push.job_events", on: connection)
    }
}

/// The events of ``PGPushClient/events(after:jobID:app:listener:pollInterval:batchSize:)``.
public struct JobEvents: AsyncSequence, Sendable {
    public typealias Element = JobEvent

    struct Source: Sendable {
        let client: PGPushClient
        let jobID: Int64?
        let app: String?
        let listener: PostgresConnection?
        let pollInterval: Duration
        let batchSize: Int
    }

    let source: Source
    let after: Int64

    public func makeAsyncIterator() -> Iterator {
        Iterator(source: source, cursor: after)
    }

    public struct Iterator: AsyncIteratorProtocol {
        let source: Source
        /// The last event read, wanted or not.
        var cursor: Int64
        var buffer: ArraySlice<JobEvent> = []

        public mutating func next() async throws -> JobEvent? {
            while true {
                if let event = buffer.popFirst() { return event }
                if Task.isCancelled { return nil }
                do {
                    let page = try await source.readOrWait(after: cursor)
                    cursor = page.last ?? cursor
                    buffer = page.events[...]
                } catch where Task.isCancelled {
                    return nil
                }
            }
        }
    }
}

extension JobEvents.Source {
    /// One read of the table: the wanted events of up to `batchSize` rows after the cursor, the last row's id,
    /// and whether it read to the end (fewer rows than asked for).
    struct Page {
        var events: [JobEvent] = []
        var last: Int64?
        var reachedTheEnd = true
    }

    /// The next page after `cursor`; at the end of the table, after waiting for more (see `events(after:)`).
    func readOrWait(after cursor: Int64) async throws -> Page {
        guard let listener else {
            let page = try await read(after: cursor)
            if page.reachedTheEnd && page.events.isEmpty { try await Task.sleep(for: pollInterval) }
            return page
        }
        do {
            // LISTEN before reading: an event committed after the read still wakes the wait.
            return try await listener.listen(on: PGPushClient.jobEventsChannel) { notifications in
                let page = try await read(after: cursor)
                if page.reachedTheEnd && page.events.isEmpty {
                    try await Self.wake(on: notifications, within: pollInterval)
                }
                return page
            }
        } catch let error as PGPushClientError {
            throw error
        } catch where !Task.isCancelled {
            client.logger.warning("pgpush: listening on \(PGPushClient.jobEventsChannel) failed; polling instead", metadata: [
                "error": "\(String(reflecting: error))",
            ])
            try await Task.sleep(for: pollInterval)
            return Page()
        }
    }

    /// Returns when a notification arrives or `interval` passes.
    static func wake(on notifications: PostgresNotificationSequence, within interval: Duration) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await Task.sleep(for: interval)
                return true
            }
            group.addTask {
                for try await _ in notifications { return true }
                return false  // the listen ended: the sleep decides
            }
            while let woke = try await group.next(), !woke {}
            group.cancelAll()
        }
    }

    /// Reads up to `batchSize` rows after `cursor`, by the primary key, and keeps the wanted ones: the cursor
    /// moves past the others too, so following one job never reads the same rows of other jobs again. A read
    /// the server never answered is retried.
    func read(after cursor: Int64) async throws -> Page {
        while true {
            do {
                let rows = try await client.rows("""
                    SELECT id, app_id, job_id, at, event, CASE WHEN wanted THEN body::text END, wanted
                      FROM (SELECT e.*, (\(jobID)::bigint IS NULL OR e.job_id = \(jobID)::bigint)
                                        AND (\(app)::text IS NULL OR e.app_id = \(app)::text) AS wanted
                              FROM push.job_events e
                             WHERE e.id > \(cursor)::bigint
                             ORDER BY e.id
                             LIMIT \(batchSize)::integer) AS scanned
                     ORDER BY id
                    """, on: nil)
                var page = Page(reachedTheEnd: rows.count < batchSize)
                for row in rows {
                    let (event, wanted) = try PGPushClient.decoding { try JobEvent.decode(row) }
                    page.last = event.id
                    if wanted { page.events.append(event) }
                }
                return page
            } catch let error as PGPushClientError where error.sqlState == nil && !Self.isPermanent(error) {
                client.logger.warning("pgpush: reading job events failed; retrying", metadata: ["error": "\(error)"])
                try await Task.sleep(for: pollInterval)
            }
        }
    }

    static func isPermanent(_ error: PGPushClientError) -> Bool {
        (error.underlying as? PSQLError)?.code == .poolClosed
    }
}

extension JobEvent {
    /// A row of ``JobEvents/Source/read(after:)``, and whether it is wanted.
    static func decode(_ row: PostgresRow) throws -> (JobEvent, Bool) {
        let (id, app, jobID, at, kind, body, wanted) =
            try row.decode((Int64, String, Int64?, Date, String, String?, Bool).self)
        let event = JobEvent(
            id: id, app: app, jobID: jobID, at: at, kind: Kind(rawValue: kind),
            body: try body.map { try JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) } ?? .null)
        return (event, wanted)
    }
}
