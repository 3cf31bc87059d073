import Foundation
import PostgresNIO

/// The arguments of one `push.enqueue` call. NULLs take the function's defaults (the validation trigger fills
/// them in).
public struct EnqueueRequest: Sendable {
    public var appID: String
    /// The APNs payload as JSON text; the server parses and validates it. `nil` for an Android-only app.
    public var payload: String?
    public var pushType: String?
    public var apnsPriority: Int32?
    public var tokens: [String]?
    public var userIDs: [String]?
    public var tags: [String]?
    public var sendAt: Date?
    public var expiresAt: Date?
    /// Seconds after `send_at` (or now) at which the notification expires; used when `expiresAt` is nil.
    public var ttlSeconds: Double?
    public var collapseID: String?
    public var idempotencyKey: String?
    public var priority: Int32?
    /// The Android message (FCM's message fields without the target) as JSON text.
    public var fcm: String?
    /// A Live Activity update's activities, a start's ActivityAttributes type, or a broadcast channel's name.
    public var activityIDs: [String]?
    public var activityType: String?
    public var channel: String?
    /// Per-device content: locale variants as JSON text (an object from BCP 47 tag to a partial payload and
    /// `fcm`), and the badge mode (`increment`). Both are validated by the database (`push.validate_job_content`).
    public var localized: String?
    public var badge: String?
    /// The Web Push message as JSON text: the plaintext the site's service worker receives (encrypted per
    /// subscription by the workers).
    public var web: String?
    /// The Web Push `Urgency`: `very-low`, `low`, `normal` or `high`; `nil` is the database's default.
    public var webUrgency: String?
    /// Broadcast controls (migration 0028): the job's own rate across the fleet (`max_rate`, notifications per
    /// second) or the interval its audience is spread over (`spread_over`, interval text such as `30 minutes`;
    /// not both), the local time each device receives it at (`local_time`, `HH:MM`), whether the app's quiet
    /// hours hold it back (`nil`: below priority 10 they do), and its frequency-cap category.
    public var maxRate: Int32?
    public var spreadOver: String?
    public var localTime: String?
    public var respectQuietHours: Bool?
    public var category: String?

    public init(
        appID: String, payload: String?, pushType: String?, apnsPriority: Int32?, tokens: [String]?, userIDs: [String]?,
        tags: [String]?, sendAt: Date?, expiresAt: Date?, ttlSeconds: Double?, collapseID: String?,
        idempotencyKey: String?, priority: Int32?, fcm: String? = nil, activityIDs: [String]? = nil,
        activityType: String? = nil, channel: String? = nil, localized: String? = nil, badge: String? = nil,
        web: String? = nil, webUrgency: String? = nil, maxRate: Int32? = nil, spreadOver: String? = nil,
        localTime: String? = nil, respectQuietHours: Bool? = nil, category: String? = nil
    ) {
        self.appID = appID
        self.payload = payload
        self.pushType = pushType
        self.apnsPriority = apnsPriority
        self.tokens = tokens
        self.userIDs = userIDs
        self.tags = tags
        self.sendAt = sendAt
        self.expiresAt = expiresAt
        self.ttlSeconds = ttlSeconds
        self.collapseID = collapseID
        self.idempotencyKey = idempotencyKey
        self.priority = priority
        self.fcm = fcm
        self.activityIDs = activityIDs
        self.activityType = activityType
        self.channel = channel
        self.localized = localized
        self.badge = badge
        self.web = web
        self.webUrgency = webUrgency
        self.maxRate = maxRate
        self.spreadOver = spreadOver
        self.localTime = localTime
        self.respectQuietHours = respectQuietHours
        self.category = category
    }
}

/// One row of `push.job_progress`: a job's counters and times.
public struct JobProgress: Sendable {
    public var jobID: Int64
    public var appID: String
    public var state: String
    public var total: Int64?
    public var delivered: Int64
    public var failed: Int64
    public var pruned: Int64
    public var pending: Int64
    public var expired: Int64
    /// Delivered per platform, from the job's own counters.
    public var iosDelivered: Int64?
    public var androidDelivered: Int64?
    public var webDelivered: Int64?
    /// The audience per platform, once the job is expanded (iOS is the rest of ``total``).
    public var androidTotal: Int64?
    public var webTotal: Int64?
    public var createdAt: Date
    public var finishedAt: Date?
    /// Tokens not sent because their person reached the category's frequency cap (not failures).
    public var capped: Int64 = 0
    /// The rate in effect once expanded (notifications per second), for a throttled job.
    public var throttle: Double? = nil
    /// When a paced job's last chunk comes due, while it runs.
    public var estimatedFinishAt: Date? = nil
    /// Tokens waiting for their zone's moment (local time, quiet hours), and the zones still to come with the
    /// moment of each, soonest first.
    public var waitingTokens: Int64 = 0
    public var waitingZones: [ZoneMoment] = []
}

/// A time zone a job's devices wait in, and the moment they receive it (`push.job_progress.waiting_zones` and
/// `waiting_moments`, pairwise).
public struct ZoneMoment: Sendable, Hashable {
    public var zone: String
    public var moment: Date

    public init(zone: String, moment: Date) {
        self.zone = zone
        self.moment = moment
    }

    /// The pairs of the two arrays, in the view's order (soonest first).
    public static func pairs(zones: [String]?, moments: [Date]?) -> [ZoneMoment] {
        zip(zones ?? [], moments ?? []).map { ZoneMoment(zone: $0, moment: $1) }
    }
}

extension OperatorStore {
    /// Calls `push.enqueue` with every value bound as a parameter and returns the job id. An unknown app is
    /// PostgreSQL's foreign_key_violation (23503), raised by `push.validate_job`.
    public func enqueue(_ request: EnqueueRequest) async throws -> Int64? {
        let r = request
        let rows = try await run("""
            SELECT push.enqueue(
                app_id => \(r.appID)::text,
                payload => \(r.payload)::jsonb,
                push_type => \(r.pushType)::text,
                apns_priority => \(r.apnsPriority)::integer,
                tokens => \(r.tokens)::text[],
                user_ids => \(r.userIDs)::text[],
                tags => \(r.tags)::text[],
                send_at => \(r.sendAt)::timestamptz,
                expires_at => coalesce(\(r.expiresAt)::timestamptz,
                                       coalesce(\(r.sendAt)::timestamptz, now()) + make_interval(secs => \(r.ttlSeconds)::double precision)),
                collapse_id => \(r.collapseID)::text,
                idempotency_key => \(r.idempotencyKey)::text,
                priority => \(r.priority)::integer,
                fcm => \(r.fcm)::jsonb,
                activity_ids => \(r.activityIDs)::text[],
                activity_type => \(r.activityType)::text,
                channel => \(r.channel)::text,
                localized => \(r.localized)::jsonb,
                badge => \(r.badge)::text,
                web => \(r.web)::jsonb,
                web_urgency => \(r.webUrgency)::text,
                max_rate => \(r.maxRate)::integer,
                spread_over => \(r.spreadOver)::interval,
                local_time => \(r.localTime)::time,
                respect_quiet_hours => \(r.respectQuietHours)::boolean,
                category => \(r.category)::text)
            """)
        return try rows.first?.decode(Int64.self)
    }

    /// The job's row of `push.job_progress`, or `nil` for an unknown job.
    public func jobProgress(_ jobID: Int64) async throws -> JobProgress? {
        try await run("""
            SELECT \(unescaped: JobProgress.columns)
              FROM push.job_progress WHERE job_id = \(jobID)
            """).first.map(JobProgress.init(row:))
    }

    /// The newest `limit` jobs of the app (of every app for `nil`), newest first.
    public func recentJobs(app: String?, limit: Int) async throws -> [JobProgress] {
        try await run("""
            SELECT \(unescaped: JobProgress.columns)
              FROM push.job_progress
             WHERE \(app)::text IS NULL OR app_id = \(app)::text
             ORDER BY job_id DESC LIMIT \(limit)
            """).map(JobProgress.init(row:))
    }
}

extension JobProgress {
    /// The columns of `push.job_progress` that ``init(row:)`` reads, in its order.
    static let columns = """
        job_id, app_id, state, total, delivered, failed, pruned, pending, expired, ios_delivered, android_delivered, \
        web_delivered, android_total, web_total, created_at, finished_at, capped, throttle, estimated_finish_at, \
        waiting_tokens, waiting_zones, waiting_moments
        """

    /// A row of ``columns``.
    init(row: PostgresRow) throws {
        let (id, app, state, total, delivered, failed, pruned, pending, expired, ios, android, web, androidTotal, webTotal,
             created, finished) = try row.decode(
            (Int64, String, String, Int64?, Int64, Int64, Int64, Int64, Int64, Int64?, Int64?, Int64?, Int64?, Int64?, Date,
             Date?).self)
        self.init(
            jobID: id, appID: app, state: state, total: total, delivered: delivered, failed: failed, pruned: pruned,
            pending: pending, expired: expired, iosDelivered: ios, androidDelivered: android, webDelivered: web,
            androidTotal: androidTotal, webTotal: webTotal, createdAt: created, finishedAt: finished)
        // Past the first 16 by position (migration 0028's columns).
        let cells = PostgresRandomAccessRow(row)
        capped = try cells[16].decode(Int64.self, context: .default)
        throttle = try cells[17].decode(Double?.self, context: .default)
        estimatedFinishAt = try cells[18].decode(Date?.self, context: .default)
        waitingTokens = try cells[19].decode(Int64.self, context: .default)
        waitingZones = ZoneMoment.pairs(
            zones: try cells[20].decode([String]?.self, context: .default),
            moments: try cells[21].decode([Date]?.self, context: .default))
    }
}

/// One row of `pgpush jobs`: a job of `push.job_progress` with its labels.
public struct JobListing: Sendable {
    public var jobID: Int64
    public var appID: String
    public var state: String
    public var total: Int64?
    public var delivered: Int64
    /// Failed and expired, as `push.job_progress` counts them.
    public var failed: Int64
    public var pending: Int64
    /// The audience and the delivered per platform, as in ``JobProgress`` (iOS's audience is the rest of `total`).
    public var androidTotal, webTotal, iosDelivered, androidDelivered, webDelivered: Int64?
    /// The job's labels; empty when it has none.
    public var labels: [String: String]
    public var createdAt: Date
    /// Tokens not sent because their person reached the category's frequency cap (not in `failed`).
    public var capped: Int64 = 0
}

extension OperatorStore {
    /// The newest `limit` jobs of `push.job_progress` (tenancy applies through the view), newest first: of
    /// `app` (every app for `nil`), with every one of `labels` (`labels @> …`, served by the `jobs_labels` GIN
    /// index; no filter when empty), in `state` (any for `nil`).
    ///
    /// Only the filters given are in the statement, so every plan can use the job id's index for
    /// `ORDER BY job_id DESC LIMIT n` or `jobs_labels` for the labels, whatever the plan cache does.
    public func listJobs(app: String?, labels: [String: String], state: String?, limit: Int) async throws -> [JobListing] {
        var binds = PostgresBindings()
        var conditions: [String] = []
        if let app {
            binds.append(app)
            conditions.append("app_id = $\(binds.count)::text")
        }
        if !labels.isEmpty {
            let object = try JSONSerialization.data(withJSONObject: labels, options: [.sortedKeys])
            binds.append(String(decoding: object, as: UTF8.self))
            conditions.append("labels @> $\(binds.count)::jsonb")
        }
        if let state {
            binds.append(state)
            conditions.append("state = $\(binds.count)::text")
        }
        binds.append(limit)
        let sql = """
            SELECT job_id, app_id, state, total, delivered, failed, pending, labels::text, created_at, android_total,
                   web_total, ios_delivered, android_delivered, web_delivered, capped
              FROM push.job_progress
            \(conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND "))
             ORDER BY job_id DESC LIMIT $\(binds.count)::bigint
            """
        return try await run(PostgresQuery(unsafeSQL: sql, binds: binds)).map { row in
            let (id, app, state, total, delivered, failed, pending, labels, created, androidTotal, webTotal, ios, android, web) =
                try row.decode((Int64, String, String, Int64?, Int64, Int64, Int64, String?, Date, Int64?, Int64?, Int64?, Int64?,
                                Int64?).self)
            var decoded: [String: String] = [:]
            if let labels, let object = try JSONSerialization.jsonObject(with: Data(labels.utf8)) as? [String: Any] {
                for (key, value) in object { decoded[key] = value as? String ?? "\(value)" }
            }
            return JobListing(
                jobID: id, appID: app, state: state, total: total, delivered: delivered, failed: failed,
                pending: pending, androidTotal: androidTotal, webTotal: webTotal, iosDelivered: ios, androidDelivered: android,
                webDelivered: web, labels: decoded, createdAt: created,
                capped: try PostgresRandomAccessRow(row)[14].decode(Int64.self, context: .default))
        }
    }
}
