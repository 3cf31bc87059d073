import Foundation
import Logging
import PGPushCore
import PostgresNIO

/// One row of `push.job_events`, as the webhook relay sends it.
public struct WebhookEvent: Sendable, Hashable {
    public var id: Int64
    public var appID: String?
    public var jobID: Int64?
    /// `at` in UTC as ISO 8601 with microseconds (`2026-03-01T12:00:00.123456Z`), formatted by the statement so
    /// that it does not depend on the session's `TimeZone` (a pooled server connection's may be anything).
    public var at: String
    public var event: String
    /// The event's `body`: PostgreSQL's text of the jsonb, sent as it is; nil when the column is NULL.
    public var body: String?

    public init(id: Int64, appID: String?, jobID: Int64?, at: String, event: String, body: String?) {
        self.id = id
        self.appID = appID
        self.jobID = jobID
        self.at = at
        self.event = event
        self.body = body
    }
}

/// Which events a relay delivers: nil is every event name, or every app.
public struct WebhookEventFilter: Sendable, Hashable {
    public var events: [String]?
    public var apps: [String]?

    public init(events: [String]? = nil, apps: [String]? = nil) {
        self.events = events
        self.apps = apps
    }
}

/// What one read found after the cursor.
public struct WebhookBatch: Sendable, Hashable {
    /// The events that pass the filter, in id order.
    public var events: [WebhookEvent]
    /// The highest event id the read looked at. Every event after the cursor up to it that is not in `events`
    /// was filtered out, so once `events` are delivered the cursor may move here: filtered-out events advance it.
    public var scannedThrough: Int64

    public init(events: [WebhookEvent], scannedThrough: Int64) {
        self.events = events
        self.scannedThrough = scannedThrough
    }
}

/// Every SQL statement of the webhook relay (`pgpush webhook`): its cursor in `push.webhook_cursors` and its
/// reads of `push.job_events`. The group role `pgpush_webhook` may run all of them.
///
/// Each is a single statement, so the relay works through PgBouncer in transaction pooling: no session state,
/// no prepared statement kept, nothing `SET`. Every call has a client-side deadline; a connection that closes
/// under it ends it at once (a restart of PostgreSQL), and the caller retries.
public final class WebhookStore: Sendable {
    public let client: PostgresClient
    let logger: Logger

    /// The NOTIFY channel of `push.job_events` (after each writing statement): a hint that new events are there.
    public static let eventsChannel = "pgpush_job_events"

    /// The longest any call may take before it is abandoned as hung.
    public static let deadline: Duration = .seconds(15)

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    @discardableResult
    func run(_ query: PostgresQuery, deadline: Duration = WebhookStore.deadline) async throws -> [PostgresRow] {
        let logger = self.logger
        return try await client.withWatchedConnection(deadline: deadline) { connection in
            try await connection.query(query, logger: logger).collect()
        }
    }

    /// The cursor of the relay named `name`: the id of the last event it is done with.
    ///
    /// On its first start the row is created at the newest event's id: a new relay delivers the events
    /// committed from then on, not the history. To deliver the history (or from any id on), insert the row
    /// before the first start: `INSERT INTO push.webhook_cursors (name) VALUES ('crm')` starts at 0.
    /// - Returns: the cursor, and whether this call created it.
    public func openCursor(name: String) async throws -> (lastEventID: Int64, created: Bool) {
        while true {
            // One snapshot: either the insert took (the row is new) or the row is read. Two first starts at
            // once: the second's insert waits for the first's and does nothing, and its snapshot predates the
            // row, so it reads nothing and asks again.
            let rows = try await run("""
                WITH created AS (
                    INSERT INTO push.webhook_cursors (name, last_event_id)
                    SELECT \(name), coalesce(max(id), 0) FROM push.job_events
                    ON CONFLICT (name) DO NOTHING
                    RETURNING last_event_id)
                SELECT last_event_id, true FROM created
                UNION ALL
                SELECT last_event_id, false FROM push.webhook_cursors WHERE name = \(name)
                """)
            if let row = rows.first { return try row.decode((Int64, Bool).self) }
        }
    }

    /// The cursor of `name` as it stands, nil when there is no such row.
    public func cursor(name: String) async throws -> Int64? {
        try await run("SELECT last_event_id FROM push.webhook_cursors WHERE name = \(name)").first?.decode(Int64.self)
    }

    /// The events after `after` that pass `filter`, at most `limit`, in id order.
    ///
    /// Event ids grow in commit order (`push.job_events`' contract), so once an id is visible no event with a
    /// smaller one can commit later: the cursor may move past every event this snapshot shows.
    public func events(after: Int64, filter: WebhookEventFilter, limit: Int) async throws -> WebhookBatch {
        let limit = max(1, limit)
        let rows = try await run("""
            WITH high AS MATERIALIZED (SELECT coalesce(max(id), 0) AS id FROM push.job_events),
            batch AS (
                SELECT e.id, e.app_id, e.job_id,
                       to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at,
                       e.event, e.body::text AS body
                  FROM push.job_events e
                 WHERE e.id > \(after) AND e.id <= (SELECT id FROM high)
                   AND (\(filter.events == nil) OR e.event = ANY(\(filter.events ?? [])::text[]))
                   AND (\(filter.apps == nil) OR e.app_id = ANY(\(filter.apps ?? [])::text[]))
                 ORDER BY e.id
                 LIMIT \(limit))
            SELECT high.id, batch.id, batch.app_id, batch.job_id, batch.at, batch.event, batch.body
              FROM high LEFT JOIN batch ON true
             ORDER BY batch.id
            """)
        var events: [WebhookEvent] = []
        var high = after
        for row in rows {
            let (top, id, appID, jobID, at, event, body) =
                try row.decode((Int64, Int64?, String?, Int64?, String?, String?, String?).self)
            high = max(high, top)
            guard let id, let at, let event else { continue }
            events.append(WebhookEvent(id: id, appID: appID, jobID: jobID, at: at, event: event, body: body))
        }
        // A full batch may stop short of the newest event: only what it covered is scanned.
        let scannedThrough = events.count == limit ? events[events.count - 1].id : high
        return WebhookBatch(events: events, scannedThrough: max(after, scannedThrough))
    }

    /// Moves the cursor of `name` from `from` to `to`, unless it no longer stands at `from` (another relay
    /// under the same name, or an operator who set it back to replay events).
    /// - Returns: true when the cursor moved.
    public func advanceCursor(name: String, from: Int64, to: Int64) async throws -> Bool {
        try await !run("""
            UPDATE push.webhook_cursors SET last_event_id = \(to), updated_at = now()
             WHERE name = \(name) AND last_event_id = \(from)
            RETURNING 1
            """).isEmpty
    }
}
