import Foundation
import PostgresNIO

/// The filters of the jobs page; every one is optional. `before` is the keyset cursor: the smallest job id of
/// the previous page.
public struct DashboardJobFilter: Sendable, Hashable, Codable {
    public var app: String?
    public var state: String?
    /// `ios`, `android` or `web`: jobs whose audience has that platform.
    public var platform: String?
    public var priority: Int32?
    /// Created at or after / before.
    public var from: Date?
    public var to: Date?
    public var jobID: Int64?
    public var idempotencyKey: String?
    /// Labels the job must carry, all of them (`labels @> {...}`, served by the index jobs_labels). One key
    /// given twice with different values matches no job.
    public var labels: [DashboardLabel]
    public var before: Int64?
    public var limit: Int

    public init(
        app: String? = nil, state: String? = nil, platform: String? = nil, priority: Int32? = nil, from: Date? = nil,
        to: Date? = nil, jobID: Int64? = nil, idempotencyKey: String? = nil, labels: [DashboardLabel] = [],
        before: Int64? = nil, limit: Int = 50
    ) {
        self.labels = labels
        self.app = app
        self.state = state
        self.platform = platform
        self.priority = priority
        self.from = from
        self.to = to
        self.jobID = jobID
        self.idempotencyKey = idempotencyKey
        self.before = before
        self.limit = limit
    }
}

/// One label of a job: `push.jobs.labels` is a flat JSON object of strings.
public struct DashboardLabel: Sendable, Hashable, Codable {
    public var key: String
    public var value: String

    public init(_ key: String, _ value: String) {
        self.key = key
        self.value = value
    }

    /// A `labels` object as JSON text, or nil for none.
    static func json(_ labels: [DashboardLabel]) -> String? {
        guard !labels.isEmpty else { return nil }
        let object = Dictionary(labels.map { ($0.key, $0.value) }, uniquingKeysWith: { _, last in last })
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// The labels of a `labels::text`, sorted by key; empty for NULL or anything but an object of strings.
    static func parse(_ text: String?) -> [DashboardLabel] {
        guard let text, let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return [] }
        return object.compactMap { key, value in (value as? String).map { DashboardLabel(key, $0) } }
            .sorted { $0.key < $1.key }
    }
}

/// A job's counters from its own row (never the audience counted from push.devices: a job not expanded yet
/// has no total).
public struct DashboardJobRow: Sendable, Codable {
    public var id: Int64
    public var appID: String
    public var state: String
    public var priority: Int32
    public var total: Int64?
    public var delivered: Int64
    /// Failed and expired.
    public var failed: Int64
    public var pruned: Int64
    public var androidTotal: Int64?
    public var androidDelivered: Int64
    public var androidFailed: Int64
    /// Web Push's part (migration 0027; 0 for a job expanded before it).
    public var webTotal: Int64?
    public var webDelivered: Int64
    public var webFailed: Int64
    public var createdAt: Date
    public var finishedAt: Date?
    public var idempotencyKey: String?
    /// Its labels, sorted by key.
    public var labels: [DashboardLabel]
    /// Tokens not sent because their person reached the category's frequency cap (migration 0028): outcomes of
    /// their own, in neither delivered nor failed.
    public var capped: Int64 = 0

    /// iOS is what is left: total − Android − web.
    public var iosTotal: Int64? { total.map { $0 - (androidTotal ?? 0) - (webTotal ?? 0) } }
    public var iosDelivered: Int64 { delivered - androidDelivered - webDelivered }
    public var iosFailed: Int64 { failed - androidFailed - webFailed }
}

/// A job's page.
public struct DashboardJobDetail: Sendable, Codable {
    public var job: DashboardJobRow
    public var sendAt: Date
    public var startedAt: Date?
    public var firstSentAt: Date?
    public var expiresAt: Date?
    public var pushType: String
    public var failureReason: String?
    public var payload: String
    public var fcm: String?
    /// The job's explicit Web Push message (`push.enqueue(..., web =>)`), and its `web_urgency`; nil when the
    /// workers derive the message from the APNs payload, or for a job from before migration 0027.
    public var web: String?
    public var webUrgency: String?
    /// A broadcast on a channel (no device tokens).
    public var channel: String?
    /// The job that replaced this one (push.enqueue's replace_key), and the job this one resends the failures of.
    public var replacedBy: Int64?
    public var resentFrom: Int64?
    /// The resends of this job's failures (push.resend_failed), oldest first.
    public var resends: [Int64]
    public var reasons: [DashboardReasonCount]
    /// Devices pruned because of this job's answers, per platform.
    public var prunedByPlatform: [String: Int64]
    /// The opens its apps reported, per platform (push.job_engagement): a platform with no delivery and no
    /// open has none.
    public var engagement: [String: DashboardJobEngagement]
    /// Its broadcast controls and where its pacing stands (migration 0028).
    public var pacing = DashboardJobPacing()

    /// Opens recorded for the job on every platform: 0 until an app reports one, and for apps that report none.
    public var opened: Int64 { engagement.values.reduce(0) { $0 + $1.opened } }
}

/// A job's broadcast controls as enqueued (push.jobs), and, while a paced job runs, what push.job_progress says
/// of it: the throttle in effect, the estimated finish, the tokens waiting for their zone's moment.
public struct DashboardJobPacing: Sendable, Codable, Hashable {
    /// `max_rate` (notifications per second) or `spread_over` (interval text), as given to push.enqueue.
    public var maxRate: Int32?
    public var spreadOver: String?
    /// `local_time` as `HH:MM`.
    public var localTime: String?
    /// Whether the app's quiet hours hold the job's devices back (the trigger fills it in: below priority 10).
    public var respectQuietHours: Bool?
    public var category: String?
    /// The rate in effect once expanded: the lower of the job's and the app's.
    public var throttle: Double?
    public var estimatedFinishAt: Date?
    public var waitingTokens: Int64 = 0
    /// The zones still to come, soonest first, each with its moment.
    public var waitingZones: [DashboardZoneMoment] = []

    public init(
        maxRate: Int32? = nil, spreadOver: String? = nil, localTime: String? = nil, respectQuietHours: Bool? = nil,
        category: String? = nil, throttle: Double? = nil, estimatedFinishAt: Date? = nil, waitingTokens: Int64 = 0,
        waitingZones: [DashboardZoneMoment] = []
    ) {
        self.maxRate = maxRate
        self.spreadOver = spreadOver
        self.localTime = localTime
        self.respectQuietHours = respectQuietHours
        self.category = category
        self.throttle = throttle
        self.estimatedFinishAt = estimatedFinishAt
        self.waitingTokens = waitingTokens
        self.waitingZones = waitingZones
    }
}

/// A zone a job's devices wait in, and the moment they receive it.
public struct DashboardZoneMoment: Sendable, Codable, Hashable {
    public var zone: String
    public var moment: Date

    public init(zone: String, moment: Date) {
        self.zone = zone
        self.moment = moment
    }
}

/// A job's opens on one platform, as push.job_engagement counts them.
public struct DashboardJobEngagement: Sendable, Codable, Hashable {
    public var platform: String
    /// The job's own counter, the one the platforms table shows.
    public var delivered: Int64
    /// Devices that reported an open (one per device).
    public var opened: Int64
    /// opened / delivered, a fraction (to 4 decimals, as the view rounds it); nil when nothing was delivered.
    public var openRate: Double?

    public init(platform: String, delivered: Int64, opened: Int64, openRate: Double?) {
        self.platform = platform
        self.delivered = delivered
        self.opened = opened
        self.openRate = openRate
    }
}

extension DashboardReader {
    /// One page of jobs, newest first; one row more than `limit` tells that another page follows.
    public func jobs(_ filter: DashboardJobFilter) async throws -> [DashboardJobRow] {
        let f = filter
        // One key with two values: no job has both.
        if Set(f.labels).count > Set(f.labels.map(\.key)).count { return [] }
        let labels = DashboardLabel.json(f.labels)
        return try await run("""
            SELECT \(unescaped: DashboardJobRow.columns) FROM push.jobs
             WHERE (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
               AND (\(f.app)::text IS NULL OR app_id = \(f.app)::text)
               AND (\(f.state)::text IS NULL OR state = \(f.state)::text)
               AND (\(f.priority)::int4 IS NULL OR priority = \(f.priority)::int4)
               AND (\(f.from)::timestamptz IS NULL OR created_at >= \(f.from)::timestamptz)
               AND (\(f.to)::timestamptz IS NULL OR created_at < \(f.to)::timestamptz)
               AND (\(f.jobID)::int8 IS NULL OR id = \(f.jobID)::int8)
               AND (\(f.idempotencyKey)::text IS NULL OR idempotency_key = \(f.idempotencyKey)::text)
               AND (\(f.before)::int8 IS NULL OR id < \(f.before)::int8)
               AND (\(labels)::jsonb IS NULL OR labels @> \(labels)::jsonb)
               AND (\(f.platform)::text IS NULL
                    OR (\(f.platform)::text = 'android' AND coalesce(android_total, 0) > 0)
                    OR (\(f.platform)::text = 'web' AND coalesce(web_total, 0) > 0)
                    OR (\(f.platform)::text = 'ios'
                        AND (total IS NULL OR total > coalesce(android_total, 0) + coalesce(web_total, 0))))
             ORDER BY id DESC LIMIT \(f.limit + 1)
            """).map(DashboardJobRow.init(row:))
    }

    /// The job's page, or nil for an unknown job or one of an app the login is not granted.
    public func job(_ jobID: Int64) async throws -> DashboardJobDetail? {
        guard let row = try await run("""
            SELECT \(unescaped: DashboardJobRow.columns), send_at, started_at, first_sent_at, expires_at, push_type,
                   failure_reason, payload::text, fcm::text, channel, replaced_by, resent_from,
                   web::text, web_urgency
              FROM push.jobs
             WHERE id = \(jobID) AND (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
            """).first else { return nil }
        let job = try DashboardJobRow(row: row)
        // Past the columns of the row type, by position: PostgresNIO decodes tuples of at most 15 columns.
        let cells = PostgresRandomAccessRow(row)
        let n = DashboardJobRow.columnCount
        let sendAt = try cells[n].decode(Date.self, context: .default)
        let startedAt = try cells[n + 1].decode(Date?.self, context: .default)
        let firstSent = try cells[n + 2].decode(Date?.self, context: .default)
        let expires = try cells[n + 3].decode(Date?.self, context: .default)
        let pushType = try cells[n + 4].decode(String.self, context: .default)
        let failure = try cells[n + 5].decode(String?.self, context: .default)
        let payload = try cells[n + 6].decode(String.self, context: .default)
        let fcm = try cells[n + 7].decode(String?.self, context: .default)
        let channel = try cells[n + 8].decode(String?.self, context: .default)
        let replacedBy = try cells[n + 9].decode(Int64?.self, context: .default)
        let resentFrom = try cells[n + 10].decode(Int64?.self, context: .default)
        let web = try cells[n + 11].decode(String?.self, context: .default)
        let webUrgency = try cells[n + 12].decode(String?.self, context: .default)
        // jobs_resent_from serves this.
        let resends = try await run("""
            SELECT id FROM push.jobs
             WHERE resent_from = \(jobID) AND (\(granted)::text[] IS NULL OR app_id = ANY (\(granted)::text[]))
             ORDER BY id
            """).map { try $0.decode(Int64.self) }

        // The job's outcomes lie between its creation (or its send_at) and its end: bounding sent_at by them
        // prunes push.deliveries to the partitions of those days.
        let from = min(job.createdAt, sendAt).addingTimeInterval(-60)
        let to = (job.finishedAt ?? Date()).addingTimeInterval(3600)
        let reasons = try await run("""
            SELECT platform, status, reason, count(*) FROM push.deliveries
             WHERE job_id = \(jobID) AND sent_at >= \(from)::timestamptz AND sent_at < \(to)::timestamptz
             GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2, 3
            """).map(DashboardReasonCount.init(row:))
        var pruned: [String: Int64] = [:]
        if job.pruned > 0 {
            for row in try await run("""
                SELECT coalesce(d.platform, 'unknown'), count(*) FROM push.pruned_devices p
                  LEFT JOIN push.deliveries d ON d.job_id = p.job_id AND d.token = p.token
                        AND d.sent_at >= \(from)::timestamptz AND d.sent_at < \(to)::timestamptz
                 WHERE p.app_id = \(job.appID) AND p.pruned_at >= \(from)::timestamptz AND p.job_id = \(jobID)
                 GROUP BY 1
                """) {
                let (platform, count) = try row.decode((String, Int64).self)
                pruned[platform] = count
            }
        }
        return DashboardJobDetail(
            job: job, sendAt: sendAt, startedAt: startedAt, firstSentAt: firstSent, expiresAt: expires,
            pushType: pushType, failureReason: failure, payload: payload, fcm: fcm, web: web, webUrgency: webUrgency,
            channel: channel,
            replacedBy: replacedBy, resentFrom: resentFrom, resends: resends, reasons: reasons,
            prunedByPlatform: pruned, engagement: try await engagement(jobID), pacing: try await pacing(jobID))
    }

    /// The job's broadcast controls; for a paced job still queued or running, push.job_progress's throttle,
    /// estimated finish and waiting zones too (the view reads its chunks). The job row is the caller's, already
    /// filtered by the granted apps.
    public func pacing(_ jobID: Int64) async throws -> DashboardJobPacing {
        guard let row = try await run("""
            SELECT max_rate, spread_over::text, to_char(local_time, 'HH24:MI'), respect_quiet_hours, category, throttle,
                   paced AND state IN ('queued', 'running')
              FROM push.jobs WHERE id = \(jobID)
            """).first else { return DashboardJobPacing() }
        let (maxRate, spreadOver, localTime, quiet, category, throttle, active) =
            try row.decode((Int32?, String?, String?, Bool?, String?, Double?, Bool).self)
        var pacing = DashboardJobPacing(
            maxRate: maxRate, spreadOver: spreadOver, localTime: localTime, respectQuietHours: quiet, category: category,
            throttle: throttle)
        guard active, let progress = try await run("""
            SELECT estimated_finish_at, waiting_tokens, waiting_zones, waiting_moments
              FROM push.job_progress WHERE job_id = \(jobID)
            """).first else { return pacing }
        let (finish, waiting, zones, moments) = try progress.decode((Date?, Int64, [String]?, [Date]?).self)
        pacing.estimatedFinishAt = finish
        pacing.waitingTokens = waiting
        pacing.waitingZones = zip(zones ?? [], moments ?? []).map { DashboardZoneMoment(zone: $0, moment: $1) }
        return pacing
    }

    /// A job's opens per platform, keyed by platform, as push.job_engagement counts them (the view filters by
    /// the granted apps itself); empty for a job that has neither deliveries nor opens.
    public func engagement(_ jobID: Int64) async throws -> [String: DashboardJobEngagement] {
        var byPlatform: [String: DashboardJobEngagement] = [:]
        for row in try await run("""
            SELECT platform, delivered, opened, open_rate::float8 FROM push.job_engagement WHERE job_id = \(jobID)
            """) {
            let (platform, delivered, opened, rate) = try row.decode((String, Int64, Int64, Double?).self)
            byPlatform[platform] = DashboardJobEngagement(platform: platform, delivered: delivered, opened: opened, openRate: rate)
        }
        return byPlatform
    }
}

extension DashboardJobRow {
    /// The columns ``init(row:)`` decodes, in its order (``columnCount`` of them).
    static let columns = """
        id, app_id, state, priority, total, delivered, failed + expired, pruned, android_total, android_delivered,
        android_failed, created_at, finished_at, idempotency_key, labels::text, web_total, web_delivered, web_failed,
        capped
        """
    static let columnCount = 19

    init(row: PostgresRow) throws {
        // By position: PostgresNIO decodes tuples of at most 15 columns.
        let c = PostgresRandomAccessRow(row)
        func cell<T: PostgresDecodable>(_ i: Int, _ type: T.Type) throws -> T { try c[i].decode(T.self, context: .default) }
        self.init(
            id: try cell(0, Int64.self), appID: try cell(1, String.self), state: try cell(2, String.self),
            priority: try cell(3, Int32.self), total: try cell(4, Int64?.self), delivered: try cell(5, Int64.self),
            failed: try cell(6, Int64.self), pruned: try cell(7, Int64.self), androidTotal: try cell(8, Int64?.self),
            androidDelivered: try cell(9, Int64.self), androidFailed: try cell(10, Int64.self),
            webTotal: try cell(15, Int64?.self), webDelivered: try cell(16, Int64.self), webFailed: try cell(17, Int64.self),
            createdAt: try cell(11, Date.self), finishedAt: try cell(12, Date?.self), idempotencyKey: try cell(13, String?.self),
            labels: DashboardLabel.parse(try cell(14, String?.self)), capped: try cell(18, Int64.self))
    }
}
