import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// What expanding one job did.
    public struct Expansion: Sendable, Hashable {
        public var jobID: Int64
        public var appID: String
        public var total: Int64
        public var chunks: Int

        public init(jobID: Int64, appID: String, total: Int64, chunks: Int) {
            self.jobID = jobID
            self.appID = appID
            self.total = total
            self.chunks = chunks
        }
    }

    /// Queued jobs that are due, of apps that are not paused; a query to be ordered by `jobs_due`'s key and
    /// limited. The app's columns are joined after the limit: joined before it, the planner read every queued
    /// job and sorted them (24 ms of a 1,000-job expansion with 20,000 queued) instead of walking `jobs_due`.
    static let dueJobs = """
        SELECT j.id, j.app_id, j.priority, j.send_at, j.tokens, j.user_ids, j.tags, j.fcm, j.activity_ids, j.activity_type,
               j.audience_kind, j.channel_id, j.payload, j.push_type, j.apns_priority, j.expires_at, j.collapse_id,
               j.failure_reason, j.variants, j.badge, j.web, j.web_urgency, j.category, j.paced, j.local_time,
               j.max_rate, j.spread_over, j.respect_quiet_hours
          FROM push.jobs j
         WHERE j.state = 'queued' AND j.send_at <= now()
           AND j.app_id NOT IN (SELECT p.id FROM push.apps p WHERE p.paused_reason IS NOT NULL)
        """

    /// Whether a job is small: not paced (its chunks are scheduled by ``expandPaced(_:explicit:audience:chunkSize:on:)``), and an explicit token list, a user audience or a list of activities of at most
    /// `size` entries, or a channel broadcast (one request).
    static func isSmallJob(size: Int) -> String {
        "(NOT j.paced AND (cardinality(j.tokens) <= \(size) OR cardinality(j.user_ids) <= \(size) OR cardinality(j.activity_ids) <= \(size) OR j.channel_id IS NOT NULL))"
    }

    /// Leaves out jobs of one entry, small at any chunk size, in the words of the partial index
    /// `jobs_due_beyond_one`, so the look for a broadcast reads that index instead of every queued job. The
    /// constants are literal: with parameters the planner could not prove the index applies.
    static let beyondOneEntry =
        "AND (j.paced OR NOT coalesce(cardinality(j.tokens) = 1 OR cardinality(j.user_ids) = 1 OR cardinality(j.activity_ids) = 1, false))"

    /// What one pass over due small jobs did.
    public struct SmallJobExpansion: Sendable {
        /// Jobs expanded (started, or done at once for an empty audience).
        public var jobs: Int
        /// Chunks made and left for a claim.
        public var unclaimedChunks: Int
        /// Chunks made already claimed by this process, in the order they should start.
        public var claimed: [ClaimedChunk]

        public init(jobs: Int, unclaimedChunks: Int, claimed: [ClaimedChunk]) {
            self.jobs = jobs
            self.unclaimedChunks = unclaimedChunks
            self.claimed = claimed
        }
    }

    /// Expands up to `limit` due small jobs in one statement: explicit token lists and user audiences of at
    /// most `chunkSize` entries, the shape of transactional traffic ("your order shipped"), Live Activity
    /// updates by activity, and channel broadcasts, whose one "token" is the channel's id. Their audience is
    /// read once, here, into 'tokens' chunks, so sending them needs no further read. A chunk holds one
    /// platform's tokens: iOS devices of an app with an APNs credential, Android devices of an app with FCM.
    /// Returns how many jobs were expanded; broadcasts are left to ``expandNextDueJob(chunkSize:)``.
    public func expandDueSmallJobs(chunkSize: Int, limit: Int) async throws -> Int {
        try await expandDueSmallJobs(chunkSize: chunkSize, limit: limit, claiming: nil, lease: .zero).jobs
    }

    /// Expands due small jobs like ``expandDueSmallJobs(chunkSize:limit:)`` and, with a `claiming` budget,
    /// claims the chunks it makes in the same statement, as ``claimChunks(_:lease:)`` would have next: a
    /// one-user job costs no claim of its own, and starts sending one round trip sooner.
    ///
    /// It claims only what the claim would have taken first. A chunk is taken when its job's priority is at
    /// least that of every chunk already waiting, in the claim's order, within the budget's room, chunk count
    /// and chunk size. Throttled apps (those with an allowance) are left to the claim, which weighs their
    /// allowance.
    public func expandDueSmallJobs(
        chunkSize: Int, limit: Int, claiming budget: ClaimBudget?, lease: Duration
    ) async throws -> SmallJobExpansion {
        let size = max(1, chunkSize)
        let claims = budget.map { $0.room > 0 && $0.maximumChunks > 0 } ?? false
        let throttledApps = budget.map { Array($0.appAllowances.keys) } ?? []
        let rows = try await run("""
            WITH due AS (
                SELECT j.id, j.app_id, j.priority, j.send_at, j.tokens, j.user_ids, j.activity_ids, j.activity_type,
                       j.audience_kind, j.channel_id, j.tags, j.fcm, j.payload, j.push_type, j.apns_priority,
                       j.expires_at, j.collapse_id, j.failure_reason, j.variants, j.badge, j.web, j.web_urgency, j.category,
                       a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL AS has_apns,
                       -- A job enqueued before its app had FCM has no Android message to send.
                       j.fcm IS NOT NULL AND a.fcm_project_id IS NOT NULL AS has_fcm,
                       -- Nor a job enqueued before its app had Web Push a web message.
                       j.web IS NOT NULL AND a.vapid_private_key_path IS NOT NULL AS has_web
                  FROM (\(unescaped: Self.dueJobs) AND \(unescaped: Self.isSmallJob(size: size))
                         ORDER BY j.priority DESC, j.send_at, j.id
                         LIMIT \(limit)
                           FOR UPDATE OF j SKIP LOCKED) j
                  JOIN push.apps a ON a.id = j.app_id
            ), audience AS (
                SELECT due.id AS job_id, t.token, push.token_platform(t.token, due.has_apns, due.has_fcm, due.has_web) AS platform
                  FROM due CROSS JOIN LATERAL unnest(due.tokens) AS t(token)
                 WHERE due.tokens IS NOT NULL AND push.token_in_audience(due.app_id, t.token, due.audience_kind, due.activity_type)
                UNION ALL
                -- One index probe per job (devices_by_user). As a plain join the planner may merge-join the batch
                -- against every device of the app, comparing each job's users with each device: seconds per
                -- batch at 20,000 devices, hours at millions. OFFSET 0 keeps the subquery from being flattened.
                SELECT due.id, d.token, d.platform
                  FROM due CROSS JOIN LATERAL (
                           SELECT d.token, d.platform FROM push.devices d
                            WHERE d.app_id = due.app_id AND d.user_id = ANY (due.user_ids)
                              AND d.token_kind = due.audience_kind
                              AND (due.activity_type IS NULL OR d.activity_type = due.activity_type) OFFSET 0) d
                 WHERE due.user_ids IS NOT NULL
                   AND ((d.platform = 'ios' AND due.has_apns) OR (d.platform = 'android' AND due.has_fcm)
                        OR (d.platform = 'web' AND due.has_web))
                UNION ALL
                -- A Live Activity update by activity: one probe of devices_by_activity per job.
                SELECT due.id, d.token, d.platform
                  FROM due CROSS JOIN LATERAL (
                           SELECT d.token, d.platform FROM push.devices d
                            WHERE d.app_id = due.app_id AND d.token_kind = 'activity' AND d.activity_id = ANY (due.activity_ids)
                           OFFSET 0) d
                 WHERE due.activity_ids IS NOT NULL AND due.has_apns
                UNION ALL
                SELECT due.id, due.channel_id, 'ios' FROM due WHERE due.channel_id IS NOT NULL
            ), numbered AS (
                SELECT job_id, token, platform,
                       ((row_number() OVER (PARTITION BY job_id, platform ORDER BY token) - 1) / \(size))::int AS seq
                  FROM audience WHERE platform IS NOT NULL
            ), outranked AS (
                -- Never ahead of work already waiting at a higher priority: the claim would take that first. Only
                -- the index range above each priority is read, not the chunks in flight at the same priority.
                SELECT p.priority FROM (SELECT DISTINCT priority FROM due) p
                 WHERE \(claims) AND EXISTS (
                       SELECT 1 FROM push.chunks c
                        WHERE c.priority > p.priority AND c.locked_by IS NULL AND c.next_attempt_at <= now()
                          AND c.app_id NOT IN (SELECT a.id FROM push.apps a WHERE a.paused_reason IS NOT NULL))
            ), grouped AS (
                SELECT n.job_id, due.app_id, due.priority, n.seq, array_agg(n.token ORDER BY n.token) AS tokens,
                       count(*)::int AS estimated, due.send_at, n.platform,
                       \(claims)
                         AND due.app_id <> ALL (\(throttledApps)::text[])
                         AND (\(budget?.maximumChunkTokens)::int4 IS NULL OR count(*) <= \(budget?.maximumChunkTokens)::int4)
                         AND due.priority NOT IN (SELECT priority FROM outranked) AS eligible
                  FROM numbered n JOIN due ON due.id = n.job_id
                 GROUP BY n.job_id, n.platform, n.seq, due.app_id, due.priority, due.send_at
            ), placed AS (
                -- The claim's room and chunk count, taken in its order: priority, then the chunk's number, then age.
                SELECT g.*,
                       g.eligible
                         AND coalesce(sum(g.estimated) FILTER (WHERE g.eligible) OVER w, 0) - g.estimated < \(budget?.room ?? 0)
                         AND count(*) FILTER (WHERE g.eligible) OVER w <= \(budget?.maximumChunks ?? 0) AS claimed
                  FROM grouped g
                WINDOW w AS (ORDER BY g.priority DESC, g.seq, g.send_at, g.job_id, g.platform)
            ), inserted AS (
                INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, tokens, estimated_tokens, next_attempt_at, platform,
                                         locked_by, locked_until, claims)
                SELECT p.job_id, p.app_id, p.priority, p.seq, 'tokens', p.tokens, p.estimated, p.send_at, p.platform,
                       CASE WHEN p.claimed THEN \(leaseOwner) END,
                       CASE WHEN p.claimed THEN now() + make_interval(secs => \(lease.inSeconds)) END,
                       CASE WHEN p.claimed THEN 1 ELSE 0 END
                  FROM placed p
                RETURNING id, job_id, app_id, priority, seq, kind, lo_token, hi_token, tokens, attempt, last_reason, claims,
                          estimated_tokens, platform, zone, locked_by IS NOT NULL AS claimed
            ), totals AS (
                SELECT job_id, sum(estimated_tokens)::int8 AS total,
                       coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'android'), 0)::int8 AS android,
                       coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'web'), 0)::int8 AS web
                  FROM inserted GROUP BY job_id
            ), started AS (
                UPDATE push.jobs j
                   SET state = 'running', total = t.total, started_at = now(), audience_at = statement_timestamp(),
                       android_total = t.android, android_delivered = 0, android_failed = 0,
                       web_total = t.web, web_delivered = 0, web_failed = 0
                  FROM totals t
                 WHERE j.id = t.job_id
                RETURNING j.id
            ), empty AS (
                -- An empty audience (a user without devices) has nothing to send: the job is done at once.
                -- A separate update keeps both joins linear: an outer join of the batch against its totals
                -- was planned as a nested loop, quadratic in the batch.
                UPDATE push.jobs j
                   SET state = 'done', total = 0, android_total = 0, web_total = 0, started_at = now(), finished_at = now(),
                       audience_at = statement_timestamp()
                  FROM due
                 WHERE j.id = due.id AND due.id NOT IN (SELECT job_id FROM totals)
                RETURNING j.id
            )
            -- The claimed chunks with their jobs, as the claim returns them, then the counts; one row of counts
            -- alone when nothing was claimed.
            SELECT \(unescaped: Self.claimedChunkColumns),
                   (SELECT count(*) FROM started) + (SELECT count(*) FROM empty),
                   (SELECT count(*) FROM inserted WHERE NOT inserted.claimed)
              FROM (SELECT 1) AS one
              LEFT JOIN (inserted c JOIN due j ON j.id = c.job_id) ON c.claimed
            """)
        var expansion = SmallJobExpansion(jobs: 0, unclaimedChunks: 0, claimed: [])
        for row in rows {
            let row = row.makeRandomAccess()
            expansion.jobs = Int(try row[Self.claimedChunkColumnCount].decode(Int64.self))
            expansion.unclaimedChunks = Int(try row[Self.claimedChunkColumnCount + 1].decode(Int64.self))
            if try row[0].decode(Int64?.self) != nil { expansion.claimed.append(try Self.claimedChunk(row)) }
        }
        expansion.claimed.sort(by: ClaimedChunk.claimOrder)
        return expansion
    }

    /// Expands the most urgent due job into chunks, if there is one: a key range per `chunkSize` devices of the
    /// audience, or slices of an explicit token list, per platform the app has a credential for. It writes no
    /// per-token rows: a million devices become a thousand small chunk rows. Returns `nil` when no queued job
    /// is due. Without `includingSmallJobs`, a job that ``expandDueSmallJobs(chunkSize:limit:)`` takes is left
    /// to it: the worker's loop runs both, and a one-user job enqueued between its batch and this look became
    /// a key range here, read again at send time, in a transaction of its own (9 % of the small jobs of a
    /// mixed run, with three statements and a device read each).
    public func expandNextDueJob(chunkSize: Int, includingSmallJobs: Bool = true) async throws -> Expansion? {
        let size = max(1, chunkSize)
        return try await transaction { connection in
            let due = try await self.run("""
                SELECT j.id, j.app_id, j.priority, j.tokens IS NOT NULL, j.send_at, j.user_ids, j.tags,
                       a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL, a.fcm_project_id IS NOT NULL AND j.fcm IS NOT NULL,
                       j.activity_ids, j.activity_type, j.audience_kind, a.vapid_private_key_path IS NOT NULL AND j.web IS NOT NULL,
                       \(unescaped: Self.pacedJobColumns)
                  FROM (\(unescaped: Self.dueJobs)
                           -- A channel job is always expanded with the small ones: it has no device audience.
                           AND j.channel_id IS NULL
                           \(unescaped: includingSmallJobs ? "" : Self.beyondOneEntry)
                           AND (\(includingSmallJobs) OR NOT coalesce(\(unescaped: Self.isSmallJob(size: size)), false))
                         ORDER BY j.priority DESC, j.send_at, j.id LIMIT 1 FOR UPDATE OF j SKIP LOCKED) j
                  JOIN push.apps a ON a.id = j.app_id
                """, on: connection)
            guard let dueRow = due.first else { return nil }
            let row = dueRow.makeRandomAccess()
            let (jobID, appID, priority, explicit) =
                (try row[0].decode(Int64.self), try row[1].decode(String.self), try row[2].decode(Int.self), try row[3].decode(Bool.self))
            let (sendAt, userIDs, tags) = (try row[4].decode(Date.self), try row[5].decode([String]?.self), try row[6].decode([String]?.self))
            let (hasAPNs, hasFCM, hasWeb) = (try row[7].decode(Bool.self), try row[8].decode(Bool.self), try row[12].decode(Bool.self))
            let (activityIDs, activityType, audienceKind) =
                (try row[9].decode([String]?.self), try row[10].decode(String?.self), try row[11].decode(String.self))

            let audience = BroadcastAudience(
                appID: appID, hasAPNs: hasAPNs, hasFCM: hasFCM, hasWeb: hasWeb, userIDs: userIDs, tags: tags,
                audienceKind: audienceKind, activityType: activityType, activityIDs: activityIDs)

            let counts: [PostgresRow]
            if try row[13].decode(Bool.self) {
                let job = PacedJob(
                    jobID: jobID, appID: appID, priority: priority, sendAt: sendAt, localTime: try row[14].decode(String?.self),
                    maxRate: try row[15].decode(Int?.self), spreadOverSeconds: try row[16].decode(Double?.self),
                    quietHours: try row[17].decode(String?.self), defaultTimezone: try row[18].decode(String.self),
                    appRateLimit: try row[19].decode(Int?.self), expiresAt: try row[20].decode(Date?.self))
                let paced = try await self.expandPaced(job, explicit: explicit, audience: audience, chunkSize: size, on: connection)
                try await self.startJob(jobID, total: paced.total, android: paced.android, web: paced.web,
                                        audienceAt: paced.audienceAt, throttle: paced.throttle, on: connection)
                return Expansion(jobID: jobID, appID: appID, total: paced.total, chunks: Int(paced.chunks))
            } else if explicit {
                counts = try await self.run("""
                    WITH typed AS (
                        SELECT t.token, t.ord, push.token_platform(t.token, \(hasAPNs), \(hasFCM), \(hasWeb)) AS platform
                          FROM push.jobs j, unnest(j.tokens) WITH ORDINALITY AS t(token, ord)
                         WHERE j.id = \(jobID) AND push.token_in_audience(j.app_id, t.token, j.audience_kind, j.activity_type)
                    ), numbered AS (
                        SELECT token, ord, platform, ((row_number() OVER (PARTITION BY platform ORDER BY ord) - 1) / \(size))::int AS seq
                          FROM typed WHERE platform IS NOT NULL
                    ), inserted AS (
                        INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, tokens, estimated_tokens, next_attempt_at, platform)
                        SELECT \(jobID), \(appID), \(priority), seq, 'tokens', array_agg(token ORDER BY ord), count(*)::int, \(sendAt), platform
                          FROM numbered GROUP BY platform, seq
                        RETURNING estimated_tokens, platform
                    )
                    SELECT coalesce(sum(estimated_tokens), 0)::int8, count(*)::int8,
                           coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'android'), 0)::int8,
                           coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'web'), 0)::int8,
                           statement_timestamp()::text
                      FROM inserted
                    """, on: connection)
            } else {
                // Upper bounds every `size` tokens of the audience, in key order. The first chunk's lower bound and
                // the last chunk's upper bound stay open. The audience filters are bound as parameters, so the
                // planner drops the ones that are NULL and a user or tag audience uses its index instead of
                // scanning every device of the app.
                counts = try await self.run("""
                    WITH audience AS (
                        SELECT d.token, d.platform,
                               row_number() OVER (PARTITION BY d.platform ORDER BY d.token) AS n,
                               count(*) OVER (PARTITION BY d.platform) AS total
                          FROM push.devices d
                         WHERE \(broadcastAudience: audience)
                    ), bounds AS (
                        SELECT token, platform, n, total FROM audience WHERE n % \(size) = 0 OR n = total
                    ), ranges AS (
                        SELECT platform, (row_number() OVER (PARTITION BY platform ORDER BY token) - 1)::int AS seq,
                               lag(token) OVER (PARTITION BY platform ORDER BY token) AS lo,
                               CASE WHEN n = total THEN NULL ELSE token END AS hi,
                               (n - coalesce(lag(n) OVER (PARTITION BY platform ORDER BY token), 0))::int AS estimated
                          FROM bounds
                    ), inserted AS (
                        INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, lo_token, hi_token, estimated_tokens, next_attempt_at, platform)
                        SELECT \(jobID), \(appID), \(priority), seq, 'range', lo, hi, estimated, \(sendAt), platform FROM ranges
                        RETURNING estimated_tokens, platform
                    )
                    SELECT coalesce(sum(estimated_tokens), 0)::int8, count(*)::int8,
                           coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'android'), 0)::int8,
                           coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'web'), 0)::int8,
                           statement_timestamp()::text
                      FROM inserted
                    """, on: connection)
            }
            let (total, chunks, android, web, audienceAt) = try counts[0].decode((Int64, Int64, Int64, Int64, String).self)
            try await self.startJob(jobID, total: total, android: android, web: web, audienceAt: audienceAt, on: connection)
            return Expansion(jobID: jobID, appID: appID, total: total, chunks: Int(chunks))
        }
    }

    /// Marks an expanded job running with its counts, or done at once for an empty audience, which has nothing to
    /// send. `audienceAt` is when the statement that counted the audience took its snapshot (as text: exact to
    /// the microsecond); a key range is read later without the devices registered after it (see `tokens(of:)`).
    /// `throttle` is a paced job's rate in effect.
    private func startJob(
        _ jobID: Int64, total: Int64, android: Int64, web: Int64, audienceAt: String, throttle: Double? = nil,
        on connection: PostgresConnection
    ) async throws {
        try await self.run("""
            UPDATE push.jobs
               SET state = CASE WHEN \(total) = 0 THEN 'done' ELSE 'running' END,
                   total = \(total), started_at = now(), audience_at = \(audienceAt)::timestamptz,
                   android_total = \(android), android_delivered = 0, android_failed = 0,
                   web_total = \(web), web_delivered = 0, web_failed = 0, throttle = \(throttle),
                   finished_at = CASE WHEN \(total) = 0 THEN now() END
             WHERE id = \(jobID)
            """, on: connection)
    }
}
