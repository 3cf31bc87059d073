import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// Claims chunks in one statement, sized in notifications by `budget`, and returns each with its job.
    ///
    /// Order: higher job priority first, then the chunk's number within its job (chunk 0 of every job before
    /// chunk 1 of any, so a one-token job is never stuck behind a large broadcast and equal-priority broadcasts
    /// share the fleet), then age. A chunk whose lease expired (its worker process died) is claimed again like
    /// a ready one. Chunks of paused apps and of jobs that ended (cancelled) stay put; maintenance drops the
    /// latter.
    public func claimChunks(_ budget: ClaimBudget, lease: Duration) async throws -> [ClaimedChunk] {
        guard budget.room > 0, budget.maximumChunks > 0 else { return [] }
        let blocked = budget.appAllowances.filter { $0.value <= 0 }.map(\.key)
        let capped = budget.appAllowances.filter { $0.value > 0 }
        let cappedApps = Array(capped.keys)
        let cappedTokens = cappedApps.map { Int64(capped[$0]!) }
        let rows = try await run("""
            WITH candidates AS (
                SELECT c.id, c.ctid AS row_ref, c.app_id, c.priority, c.seq, c.estimated_tokens
                  FROM push.chunks c
                 WHERE ((c.locked_by IS NULL AND c.next_attempt_at <= now())
                        -- A rescue: the holding process stopped renewing its lease. Never this process's own
                        -- chunk, which may just have a late heartbeat while its requests are in flight.
                        OR (c.locked_until < now() AND c.locked_by <> \(leaseOwner)))
                   AND c.app_id <> ALL (\(blocked)::text[])
                   AND (\(budget.maximumChunkTokens)::int4 IS NULL OR c.estimated_tokens <= \(budget.maximumChunkTokens)::int4)
                   -- Not an anti-join: the planner estimated it kept few chunks, then read and sorted the whole
                   -- queue (21 of 34 ms for 1,000 of 20,000 chunks) instead of walking chunks_claimable.
                   AND c.app_id NOT IN (SELECT p.id FROM push.apps p WHERE p.paused_reason IS NOT NULL)
                   -- An app whose Web Push is paused sends its other platforms on.
                   AND (c.platform <> 'web' OR c.app_id NOT IN (SELECT p.id FROM push.apps p WHERE p.web_push_paused_reason IS NOT NULL))
                 ORDER BY c.priority DESC, c.seq, c.id
                 LIMIT \(budget.maximumChunks)
                   FOR NO KEY UPDATE OF c SKIP LOCKED
            ), per_app AS (
                SELECT k.*, allowed.tokens AS allowance,
                       sum(k.estimated_tokens) OVER (PARTITION BY k.app_id ORDER BY k.priority DESC, k.seq, k.id)
                         - k.estimated_tokens AS app_before
                  FROM candidates k
                  LEFT JOIN unnest(\(cappedApps)::text[], \(cappedTokens)::int8[]) AS allowed(app_id, tokens)
                    ON allowed.app_id = k.app_id
            ), eligible AS (
                SELECT e.row_ref,
                       sum(e.estimated_tokens) OVER (ORDER BY e.priority DESC, e.seq, e.id) - e.estimated_tokens AS before
                  FROM per_app e
                 WHERE e.allowance IS NULL OR e.app_before < e.allowance
            ), claimed AS (
                -- The chunks are named by the row versions the candidates locked (a TID scan) and the job is
                -- probed per chunk, so the plan cannot depend on statistics. With push.jobs analyzed while
                -- every job was done, the planner once put the active jobs outside a nested loop that re-sorted
                -- the candidates per job (a 15-second claim at 20,000 jobs), and an id list was looked up in
                -- the wrong index (0.5 s). A row that another transaction moved meanwhile is not found and
                -- stays for the next claim. The job's state is checked per claimed chunk, not per candidate:
                -- a probe per candidate made the claim 11 % slower with 1,000,000 finished jobs. The only
                -- chunks it turns away are a cancelled job's rescued ones, which maintenance drops.
                UPDATE push.chunks c
                   SET locked_by = \(leaseOwner),
                       locked_until = now() + make_interval(secs => \(lease.inSeconds)),
                       claims = c.claims + 1
                 WHERE c.ctid = ANY (ARRAY(SELECT eligible.row_ref FROM eligible WHERE eligible.before < \(budget.room)))
                   AND (SELECT j.state FROM push.jobs j WHERE j.id = c.job_id) IN ('queued', 'running')
                RETURNING c.id, c.job_id, c.app_id, c.priority, c.seq, c.kind, c.lo_token, c.hi_token, c.tokens,
                          c.attempt, c.last_reason, c.claims, c.estimated_tokens, c.platform, c.zone
            )
            SELECT \(unescaped: Self.claimedChunkColumns)
              FROM claimed c JOIN push.jobs j ON j.id = c.job_id
            """)
        // The claim does not keep the candidates' order; restore it so urgent chunks start first.
        return try rows.map { try Self.claimedChunk($0.makeRandomAccess()) }.sorted(by: ClaimedChunk.claimOrder)
    }

    /// The columns of a claimed chunk and its job, in the order ``claimedChunk(_:)`` reads them, for a
    /// statement that has its chunks as `c` and their jobs as `j`.
    static let claimedChunkColumns = """
        c.id, c.job_id, c.app_id, c.priority, c.seq, c.kind, c.lo_token, c.hi_token,
        coalesce(c.tokens, '{}'), c.attempt, c.last_reason, c.claims, c.estimated_tokens,
        j.payload::text, j.push_type, j.apns_priority::int, j.expires_at, j.collapse_id, j.user_ids, j.tags,
        j.failure_reason, c.platform, CASE WHEN c.platform = 'android' THEN push.fcm_for_send(j.fcm, j.id)::text END,
        j.audience_kind, j.activity_type, j.activity_ids IS NOT NULL, j.channel_id, j.badge IS NOT NULL,
        CASE WHEN (j.variants IS NOT NULL OR j.badge IS NOT NULL)
             AND c.platform <> 'web' THEN push.personal_bodies(j.payload, j.fcm, j.variants, j.badge, c.platform, j.id) END,
        CASE WHEN c.platform = 'web' THEN j.web::text END, j.web_urgency, c.zone, j.category,
        CASE WHEN j.category IS NOT NULL THEN (
            SELECT ARRAY[(a.frequency_caps -> j.category ->> 'max')::float8,
                         extract(epoch FROM (a.frequency_caps -> j.category ->> 'per')::interval)::float8]
              FROM push.apps a WHERE a.id = j.app_id AND a.frequency_caps ? j.category) END
        """

    /// How many columns ``claimedChunkColumns`` has: a statement's own columns follow them.
    static let claimedChunkColumnCount = 34

    /// Reads the first columns of `row`, laid out as ``claimedChunkColumns``.
    static func claimedChunk(_ row: PostgresRandomAccessRow) throws -> ClaimedChunk {
        var job = JobDetails(
            id: try row[1].decode(Int64.self), appID: try row[2].decode(String.self),
            payload: Array(try row[13].decode(String.self).utf8), pushType: try row[14].decode(String.self),
            apnsPriority: try row[15].decode(Int.self), expiresAt: try row[16].decode(Date?.self),
            collapseID: try row[17].decode(String?.self), userIDs: try row[18].decode([String]?.self),
            tags: try row[19].decode([String]?.self))
        job.fcmMessage = try row[22].decode(String?.self).map { Array($0.utf8) }
        job.audienceKind = try row[23].decode(String.self)
        job.activityType = try row[24].decode(String?.self)
        job.byActivity = try row[25].decode(Bool.self)
        job.channelID = try row[26].decode(String?.self)
        job.incrementsBadge = try row[27].decode(Bool.self)
        job.personalBodies = try row[28].decode([String]?.self)
        job.webMessage = try row[29].decode(String?.self).map { Array($0.utf8) }
        job.webUrgency = try row[30].decode(String?.self)
        job.category = try row[32].decode(String?.self)
        if let cap = try row[33].decode([Double]?.self), cap.count == 2 {
            job.frequencyCap = FrequencyCap(maximumJobs: Int(cap[0]), window: .milliseconds(Int64(cap[1] * 1000)))
        }
        let platformName = try row[21].decode(String.self)
        guard let platform = DevicePlatform(rawValue: platformName) else {
            // A platform this build does not know (a newer schema): never sent as another platform's token.
            throw PGPushError(.invalidInput, "chunk has platform \(platformName), which this worker does not know")
        }
        return ClaimedChunk(
            id: try row[0].decode(Int64.self), jobID: job.id, appID: job.appID, priority: try row[3].decode(Int.self),
            seq: try row[4].decode(Int.self), kind: ClaimedChunk.Kind(rawValue: try row[5].decode(String.self)) ?? .tokens,
            loToken: try row[6].decode(String?.self), hiToken: try row[7].decode(String?.self),
            tokens: try row[8].decode([String].self), attempt: try row[9].decode(Int.self),
            lastReason: try row[10].decode(String?.self), claims: try row[11].decode(Int.self),
            estimatedTokens: try row[12].decode(Int.self), job: job, jobFailure: try row[20].decode(String?.self),
            platform: platform, zone: try row[31].decode(String?.self))
    }

    /// The tokens of a 'range' chunk: the job's audience within the chunk's key range, read at send time.
    /// A device registered after the job's audience was counted (`push.jobs.audience_at`) is not part of it;
    /// one removed since is simply not found. The completion corrects the job's total by the difference from
    /// the chunk's estimate (``ChunkCompletion/readTokens``). A job expanded before `audience_at` existed
    /// reads every device of the range, as it did.
    public func tokens(of chunk: ClaimedChunk) async throws -> [String] {
        if chunk.kind == .tokens { return chunk.tokens }
        let rows = try await run("""
            SELECT d.token FROM push.devices d
             WHERE \(audienceOf: chunk)
             ORDER BY d.token
            """)
        return try rows.map { try $0.decode(String.self) }
    }

    /// Fails a job whose requests APNs refuses for every token (a job-level error): its remaining tokens are
    /// recorded with `reason` instead of being sent, and it ends `failed` when its last chunk is written. A
    /// small job may already have ended `failed` (every answer was the error) when this is written; it still
    /// gets its reason.
    ///
    /// A channel broadcast answered `ChannelNotRegistered` tells that the channel is gone on APNs: its row
    /// becomes `deleted` in the same statement, so no producer enqueues to it again.
    public func failJob(_ jobID: Int64, reason: String) async throws {
        try await run("""
            WITH failed AS (
                UPDATE push.jobs SET failure_reason = \(reason)
                 WHERE id = \(jobID) AND failure_reason IS NULL AND state IN ('queued', 'running', 'failed')
                RETURNING app_id, channel_id
            )
            UPDATE push.channels c
               SET state = 'deleted', deleted_at = now(), updated_at = now(),
                   failure_reason = 'APNs answered ChannelNotRegistered to a broadcast: the channel no longer exists'
              FROM failed
             WHERE \(reason) = 'ChannelNotRegistered' AND c.app_id = failed.app_id AND c.channel_id = failed.channel_id
               AND c.state IN ('active', 'deleting')
            """)
    }

    /// Extends the lease of the chunks this process holds (`holding`: claimed and not yet recorded), and
    /// refreshes its registry heartbeat. Returns the number of live workers (for rate-limit shares). It gives
    /// up after a third of the lease, so one hung call leaves time for the next before the leases run out.
    ///
    /// The maintenance leadership, if this process holds it, is renewed with the chunks: it lasts as long as
    /// the process lives, however long a pass takes, and passes to another worker one lease after it dies.
    ///
    /// Only the chunks named are renewed, not every row that names this process: after a failover, the new
    /// primary may hold chunks whose completion this process wrote to the old one, unreplicated. They still
    /// carry its lease; left alone they run out and are rescued (their tokens sent again: at least once),
    /// where renewing them would keep the job running forever.
    public func heartbeat(lease: Duration, liveWindow: Duration, holding: [Int64]) async throws -> Int {
        // SKIP LOCKED: a chunk row locked right now is being recorded by this process's own write (it is about
        // to be deleted) or rescued by another (it is lost anyway). Waiting for it could outlast the lock
        // timeout, and a failed heartbeat would also miss the registry: the other workers would count this
        // one dead and take a larger share of every rate limit.
        let rows = try await run("""
            WITH mine AS (
                SELECT id FROM push.chunks WHERE id = ANY (\(holding)) AND locked_by = \(leaseOwner)
                   FOR NO KEY UPDATE SKIP LOCKED
            ), extended AS (
                UPDATE push.chunks c SET locked_until = now() + make_interval(secs => \(lease.inSeconds))
                  FROM mine WHERE c.id = mine.id
                RETURNING 1
            ), beat AS (
                UPDATE push.workers SET heartbeat_at = now() WHERE id = \(workerID) RETURNING 1
            ), leadership AS (
                UPDATE push.leader_leases SET expires_at = now() + make_interval(secs => \(lease.inSeconds))
                 WHERE holder = \(leaseOwner) RETURNING 1
            )
            SELECT count(*)::int8 FROM push.workers
             WHERE heartbeat_at > now() - make_interval(secs => \(liveWindow.inSeconds)) OR id = \(workerID)
            """, deadline: lease / 3)
        return Int(try rows.first?.decode(Int64.self) ?? 1)
    }

    /// Gives chunks back unsent (graceful shutdown before they started); the claim does not count as an attempt.
    public func release(_ chunkIDs: [Int64], deadline: Duration = QueueStore.deadline) async throws {
        guard !chunkIDs.isEmpty else { return }
        try await run("""
            UPDATE push.chunks SET locked_by = NULL, locked_until = NULL, claims = greatest(claims - 1, 0)
             WHERE id = ANY (\(chunkIDs)) AND locked_by = \(leaseOwner)
            """, deadline: deadline)
    }
}

extension PostgresQuery.StringInterpolation {
    /// The condition that picks a 'range' chunk's audience from `push.devices d`: the devices of the chunk's
    /// app, platform and key range that the job's filters (users, tags, token kind, activity) select, counted
    /// when its audience was (``QueueStore/tokens(of:)``). One definition for every read of a chunk's devices.
    mutating func appendInterpolation(audienceOf chunk: ClaimedChunk) {
        let job = chunk.job
        appendLiteral("d.app_id = ")
        appendInterpolation(chunk.appID)
        appendLiteral(" AND d.platform = ")
        appendInterpolation(chunk.platform.rawValue)
        appendLiteral(" AND NOT coalesce(d.created_at > (SELECT j.audience_at FROM push.jobs j WHERE j.id = ")
        appendInterpolation(chunk.jobID)
        appendLiteral("), false) AND (")
        appendInterpolation(chunk.loToken)
        appendLiteral("::text IS NULL OR d.token > ")
        appendInterpolation(chunk.loToken)
        appendLiteral(") AND (")
        appendInterpolation(chunk.hiToken)
        appendLiteral("::text IS NULL OR d.token <= ")
        appendInterpolation(chunk.hiToken)
        appendLiteral(") AND (")
        appendInterpolation(job.userIDs)
        appendLiteral("::text[] IS NULL OR d.user_id = ANY (")
        appendInterpolation(job.userIDs)
        appendLiteral("::text[])) AND (")
        appendInterpolation(job.tags)
        appendLiteral("::text[] IS NULL OR d.tags && ")
        appendInterpolation(job.tags)
        appendLiteral("::text[]) AND d.token_kind = ")
        appendInterpolation(job.audienceKind)
        appendLiteral(" AND (")
        appendInterpolation(job.activityType)
        appendLiteral("::text IS NULL OR d.activity_type = ")
        appendInterpolation(job.activityType)
        // The list is read from the job's row, not sent with every chunk's read.
        appendLiteral(") AND (NOT ")
        appendInterpolation(job.byActivity)
        appendLiteral(" OR d.activity_id = ANY ((SELECT j.activity_ids FROM push.jobs j WHERE j.id = ")
        appendInterpolation(chunk.jobID)
        appendLiteral(")::text[]))")
        // A zone's part of the range: devices without a zone of their own are in the app's default one. Written
        // as two arms so each is a range of devices_by_zone; the second is read only for the default zone.
        if let zone = chunk.zone {
            appendLiteral(" AND (d.timezone = ")
            appendInterpolation(zone)
            appendLiteral(" OR (d.timezone IS NULL AND ")
            appendInterpolation(zone)
            appendLiteral(" = (SELECT a.default_timezone FROM push.apps a WHERE a.id = ")
            appendInterpolation(chunk.appID)
            appendLiteral(")))")
        }
    }
}
