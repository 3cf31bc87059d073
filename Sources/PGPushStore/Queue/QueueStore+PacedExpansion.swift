import Foundation
import PGPushCore
import PostgresNIO

/// A job whose chunks are scheduled when it is expanded (`push.jobs.paced`): its own rate (`max_rate`,
/// `spread_over`), a local time of day in each device's zone (`local_time`), or quiet hours that apply.
///
/// Everything is decided per zone and per chunk, never per device: a zone's devices become key ranges of their
/// own (`push.chunks.zone`), and each chunk's `next_attempt_at` is the moment it may go. Any worker of the fleet
/// claims a chunk once it is due, so the pace holds across workers and the app's other jobs are not held back.
struct PacedJob: Sendable {
    var jobID: Int64
    var appID: String
    var priority: Int
    var sendAt: Date
    /// `push.jobs.local_time` as text (`HH:MM:SS`).
    var localTime: String?
    var maxRate: Int?
    /// `push.jobs.spread_over` in seconds.
    var spreadOverSeconds: Double?
    /// The app's quiet hours, when the job respects them.
    var quietHours: String?
    var defaultTimezone: String
    /// The app's `rate_limit`: the lower of it and the job's rate is the one in effect.
    var appRateLimit: Int?
    /// A chunk due after the job expires is due at its expiry instead, when its tokens are recorded `Expired`:
    /// the job ends then, not at a zone's moment long after.
    var expiresAt: Date?

    /// Whether its devices are split by zone: each zone has its own moment.
    var zoned: Bool { localTime != nil || quietHours != nil }

    /// The rate in effect once the audience is known: the job's own (`max_rate`, or the audience over
    /// `spread_over`), and not above the app's.
    func rate(audience: Int64) -> Double? {
        var rate: Double?
        if let maxRate { rate = Double(maxRate) }
        if let spreadOverSeconds, spreadOverSeconds > 0 { rate = max(Double(audience), 1) / spreadOverSeconds }
        if let appRateLimit, let own = rate { rate = min(own, Double(appRateLimit)) }
        return rate
    }

    /// Tokens per chunk: about a tenth of a second's worth at the job's own rate, so a chunk that leaves at
    /// once is a small burst, and never more than the worker's chunk size.
    func chunkSize(rate: Double?, chunkSize: Int) -> Int {
        guard let rate else { return max(1, chunkSize) }
        return max(1, min(chunkSize, Int((rate / 10).rounded(.up))))
    }
}

extension QueueStore {
    /// The columns of `push.jobs j` and `push.apps a` that a paced job's expansion needs, after the others.
    static let pacedJobColumns = """
        j.paced, j.local_time::text, j.max_rate, extract(epoch FROM j.spread_over)::float8,
        CASE WHEN j.respect_quiet_hours THEN a.quiet_hours END, a.default_timezone, a.rate_limit, j.expires_at
        """

    /// Schedules every chunk of a due paced job, and returns what ``expandNextDueJob(chunkSize:includingSmallJobs:)``
    /// returns for the others: the total, the chunks, Android's and the web's part, and the audience's snapshot;
    /// and the rate in effect, which the job's row keeps (`push.jobs.throttle`).
    ///
    /// Each chunk is due at `max(moment, previous chunk's due + its tokens / rate)`, over the chunks in the
    /// order of their moments; written as a running maximum so one statement computes it: chunk i is due at
    /// `before_i / rate + max over j ≤ i of (moment_j - before_j / rate)`, with `before` the tokens ahead of it.
    func expandPaced(
        _ job: PacedJob, explicit: Bool, audience: BroadcastAudience, chunkSize: Int, on connection: PostgresConnection
    ) async throws -> (total: Int64, chunks: Int64, android: Int64, web: Int64, audienceAt: String, throttle: Double?) {
        var rate: Double?
        if job.spreadOverSeconds != nil || job.maxRate != nil {
            var audienceCount: Int64 = 0
            if job.spreadOverSeconds != nil {
                let counted = explicit
                    ? try await self.run("SELECT cardinality(j.tokens)::int8 FROM push.jobs j WHERE j.id = \(job.jobID)", on: connection)
                    : try await self.run("SELECT count(*)::int8 FROM push.devices d WHERE \(broadcastAudience: audience)", on: connection)
                audienceCount = try counted.first?.decode(Int64?.self) ?? 0
            }
            rate = job.rate(audience: audienceCount)
        }
        let size = job.chunkSize(rate: rate, chunkSize: chunkSize)
        let rows: [PostgresRow]
        if explicit {
            rows = try await self.run("""
                WITH params AS (
                    SELECT \(job.sendAt)::timestamptz AS send_at, \(job.localTime)::time AS local_time,
                           \(job.quietHours)::text AS quiet_hours, \(rate)::float8 AS rate,
                           \(job.expiresAt)::timestamptz AS expires_at
                ), typed AS (
                    SELECT t.token, t.ord, push.token_platform(t.token, \(audience.hasAPNs), \(audience.hasFCM), \(audience.hasWeb)) AS platform,
                           CASE WHEN \(job.zoned) THEN coalesce(
                               (SELECT d.timezone FROM push.devices d WHERE d.app_id = j.app_id AND d.token = t.token),
                               \(job.defaultTimezone)) ELSE '' END AS zone
                      FROM push.jobs j, unnest(j.tokens) WITH ORDINALITY AS t(token, ord)
                     WHERE j.id = \(job.jobID) AND push.token_in_audience(j.app_id, t.token, j.audience_kind, j.activity_type)
                ), numbered AS (
                    SELECT token, ord, platform, zone,
                           ((row_number() OVER (PARTITION BY platform, zone ORDER BY ord) - 1) / \(size))::int AS seq_in_zone
                      FROM typed WHERE platform IS NOT NULL
                ), chunks AS (
                    SELECT platform, zone, seq_in_zone, NULL::text AS lo, NULL::text AS hi,
                           array_agg(token ORDER BY ord) AS tokens, count(*)::int AS estimated
                      FROM numbered GROUP BY platform, zone, seq_in_zone
                ), \(unescaped: Self.pacedSchedule)
                INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, lo_token, hi_token, tokens, estimated_tokens,
                                         next_attempt_at, platform, zone)
                SELECT \(job.jobID), \(job.appID), \(job.priority), s.seq, 'tokens', NULL, NULL, s.tokens, s.estimated, s.due,
                       s.platform, CASE WHEN \(job.zoned) THEN s.zone END
                  FROM scheduled s
                RETURNING estimated_tokens, platform, statement_timestamp()::text
                """, on: connection)
        } else {
            rows = try await self.run("""
                WITH params AS (
                    SELECT \(job.sendAt)::timestamptz AS send_at, \(job.localTime)::time AS local_time,
                           \(job.quietHours)::text AS quiet_hours, \(rate)::float8 AS rate,
                           \(job.expiresAt)::timestamptz AS expires_at
                ), numbered AS (
                    SELECT z.token, z.platform, z.zone,
                           row_number() OVER (PARTITION BY z.platform, z.zone ORDER BY z.token) AS n,
                           count(*) OVER (PARTITION BY z.platform, z.zone) AS total
                      FROM (SELECT d.token, d.platform,
                                   CASE WHEN \(job.zoned) THEN coalesce(d.timezone, \(job.defaultTimezone)) ELSE '' END AS zone
                              FROM push.devices d WHERE \(broadcastAudience: audience)) z
                ), bounds AS (
                    SELECT * FROM numbered WHERE n % \(size) = 0 OR n = total
                ), chunks AS (
                    SELECT platform, zone, (row_number() OVER w - 1)::int AS seq_in_zone,
                           lag(token) OVER w AS lo, CASE WHEN n = total THEN NULL ELSE token END AS hi,
                           NULL::text[] AS tokens, (n - coalesce(lag(n) OVER w, 0))::int AS estimated
                      FROM bounds WINDOW w AS (PARTITION BY platform, zone ORDER BY token)
                ), \(unescaped: Self.pacedSchedule)
                INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, lo_token, hi_token, tokens, estimated_tokens,
                                         next_attempt_at, platform, zone)
                SELECT \(job.jobID), \(job.appID), \(job.priority), s.seq, 'range', s.lo, s.hi, NULL, s.estimated, s.due,
                       s.platform, CASE WHEN \(job.zoned) THEN s.zone END
                  FROM scheduled s
                RETURNING estimated_tokens, platform, statement_timestamp()::text
                """, on: connection)
        }
        var result: (total: Int64, chunks: Int64, android: Int64, web: Int64, audienceAt: String, throttle: Double?) =
            (0, 0, 0, 0, "", rate)
        for row in rows {
            let (estimated, platform, audienceAt) = try row.decode((Int, String, String).self)
            result.audienceAt = audienceAt
            result.total += Int64(estimated)
            result.chunks += 1
            if platform == DevicePlatform.android.rawValue { result.android += Int64(estimated) }
            if platform == DevicePlatform.web.rawValue { result.web += Int64(estimated) }
        }
        if rows.isEmpty {
            result.audienceAt = try await self.run("SELECT statement_timestamp()::text", on: connection)[0].decode(String.self)
        }
        return result
    }

    /// How long until each of the next chunks of running paced jobs comes due, within `window`, soonest first
    /// (at most 64): the worker wakes its claim at each, as no NOTIFY announces them. Read through the partial
    /// index of paced jobs, so it costs nothing while none runs.
    public func pacedChunksDue(within window: Duration) async throws -> [Duration] {
        let rows = try await run("""
            SELECT (1000 * extract(epoch FROM c.next_attempt_at - now()))::int8
              FROM push.chunks c
             WHERE c.job_id IN (SELECT j.id FROM push.jobs j WHERE j.paced AND j.state = 'running')
               AND c.locked_by IS NULL AND c.next_attempt_at > now()
               AND c.next_attempt_at <= now() + make_interval(secs => \(window.inSeconds))
             ORDER BY c.next_attempt_at
             LIMIT 64
            """)
        return try rows.map { .milliseconds(try $0.decode(Int64.self)) }
    }

    /// The schedule of a paced job's `chunks` (platform, zone, seq_in_zone, lo, hi, tokens, estimated), given
    /// `params` (send_at, local_time, quiet_hours, rate, expires_at): each zone's moment, then each chunk's due time and
    /// number in the order of their moments. Chunks of one moment interleave zones and platforms, so a rate
    /// is shared by all of them.
    static let pacedSchedule = """
        moments AS (
            SELECT z.zone, push.local_moment(p.send_at, nullif(z.zone, ''), p.local_time, p.quiet_hours) AS moment
              FROM (SELECT DISTINCT zone FROM chunks) z, params p
        ), ordered AS (
            SELECT c.*, m.moment,
                   (row_number() OVER o - 1)::int AS seq,
                   coalesce(sum(c.estimated) OVER (o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::float8 AS before
              FROM chunks c JOIN moments m ON m.zone = c.zone
            WINDOW o AS (ORDER BY m.moment, c.seq_in_zone, c.zone, c.platform)
        ), scheduled AS (
            SELECT o.*,
                   least(CASE WHEN p.rate IS NULL THEN o.moment
                              ELSE to_timestamp(o.before / p.rate + max(extract(epoch FROM o.moment) - o.before / p.rate)
                                                OVER (ORDER BY o.seq ROWS UNBOUNDED PRECEDING)) END,
                         p.expires_at) AS due
              FROM ordered o, params p
        )
        """
}

/// The devices a broadcast (a key-range job) reaches: the app's devices of the platforms it can send, filtered
/// by the job's users, tags, kind of token and activities. The filters are bound as parameters, so the planner
/// drops the ones that are NULL and a user or tag audience uses its index.
struct BroadcastAudience: Sendable {
    var appID: String
    var hasAPNs: Bool
    var hasFCM: Bool
    var hasWeb: Bool
    var userIDs: [String]?
    var tags: [String]?
    var audienceKind: String
    var activityType: String?
    var activityIDs: [String]?
}

extension PostgresQuery.StringInterpolation {
    mutating func appendInterpolation(broadcastAudience audience: BroadcastAudience) {
        appendLiteral("d.app_id = ")
        appendInterpolation(audience.appID)
        appendLiteral(" AND ((d.platform = 'ios' AND ")
        appendInterpolation(audience.hasAPNs)
        appendLiteral(") OR (d.platform = 'android' AND ")
        appendInterpolation(audience.hasFCM)
        appendLiteral(") OR (d.platform = 'web' AND ")
        appendInterpolation(audience.hasWeb)
        appendLiteral(")) AND (")
        appendInterpolation(audience.userIDs)
        appendLiteral("::text[] IS NULL OR d.user_id = ANY (")
        appendInterpolation(audience.userIDs)
        appendLiteral("::text[])) AND (")
        appendInterpolation(audience.tags)
        appendLiteral("::text[] IS NULL OR d.tags && ")
        appendInterpolation(audience.tags)
        appendLiteral("::text[]) AND d.token_kind = ")
        appendInterpolation(audience.audienceKind)
        appendLiteral(" AND (")
        appendInterpolation(audience.activityType)
        appendLiteral("::text IS NULL OR d.activity_type = ")
        appendInterpolation(audience.activityType)
        appendLiteral(") AND (")
        appendInterpolation(audience.activityIDs)
        appendLiteral("::text[] IS NULL OR d.activity_id = ANY (")
        appendInterpolation(audience.activityIDs)
        appendLiteral("::text[]))")
    }
}
