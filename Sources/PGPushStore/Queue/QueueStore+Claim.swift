import Foundation
import PostgresNIO

extension QueueStore {
    /// Claims up to `limit` chunks in one statement. Order: higher job priority first, then the chunk's number
    /// within its job, so a one-token job is never stuck behind a large broadcast and equal-priority broadcasts
    /// share the fleet. A chunk whose lease expired (its worker died) is claimed again like a ready one.
    /// Chunks of paused apps stay put.
    public func claimChunks(limit: Int, lease: Duration) async throws -> [ClaimedChunk] {
        guard limit > 0 else { return [] }
        let leaseSeconds = Double(lease.components.seconds) + Double(lease.components.attoseconds) / 1e18
        let rows = try await run("""
            WITH candidates AS (
                SELECT c.id
                  FROM push.chunks c
                 WHERE ((c.locked_by IS NULL AND c.next_attempt_at <= now())
                        -- A rescue: the holder stopped renewing its lease. Never our own chunk, which may just
                        -- have a late heartbeat while its requests are still in flight.
                        OR (c.locked_until < now() AND c.locked_by <> \(workerID)))
                   AND NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = c.app_id AND a.paused_reason IS NOT NULL)
                 ORDER BY c.priority DESC, c.seq, c.id
                 LIMIT \(limit)
                   FOR NO KEY UPDATE SKIP LOCKED
            )
            UPDATE push.chunks c
               SET locked_by = \(workerID),
                   locked_until = now() + make_interval(secs => \(leaseSeconds)),
                   claims = c.claims + 1
              FROM candidates
             WHERE c.id = candidates.id
            RETURNING c.id, c.job_id, c.app_id, c.priority, c.seq, c.kind, c.lo_token, c.hi_token,
                      coalesce(c.tokens, '{}'), c.attempt, c.last_reason, c.claims
            """)
        // UPDATE … RETURNING does not keep the candidates' order; restore it so urgent chunks start first.
        return try rows.map { row in
            let (id, jobID, appID, priority, seq, kind, lo, hi, tokens, attempt, lastReason, claims) = try row.decode(
                (Int64, Int64, String, Int, Int, String, String?, String?, [String], Int, String?, Int).self)
            return ClaimedChunk(
                id: id, jobID: jobID, appID: appID, priority: priority, seq: seq,
                kind: ClaimedChunk.Kind(rawValue: kind) ?? .tokens, loToken: lo, hiToken: hi, tokens: tokens,
                attempt: attempt, lastReason: lastReason, claims: claims)
        }.sorted { ($1.priority, $0.seq, $0.id) < ($0.priority, $1.seq, $1.id) }
    }

    /// The tokens of a 'range' chunk: the job's audience within the chunk's key range, read at send time.
    public func tokens(of chunk: ClaimedChunk, job: JobDetails) async throws -> [String] {
        if chunk.kind == .tokens { return chunk.tokens }
        let rows = try await run("""
            SELECT d.token FROM push.devices d
             WHERE d.app_id = \(chunk.appID)
               AND (\(chunk.loToken)::text IS NULL OR d.token > \(chunk.loToken))
               AND (\(chunk.hiToken)::text IS NULL OR d.token <= \(chunk.hiToken))
               AND (\(job.userIDs)::text[] IS NULL OR d.user_id = ANY (\(job.userIDs)::text[]))
               AND (\(job.tags)::text[] IS NULL OR d.tags && \(job.tags)::text[])
             ORDER BY d.token
            """)
        return try rows.map { try $0.decode(String.self) }
    }

    /// The sending details of jobs, by id.
    public func jobDetails(_ ids: [Int64]) async throws -> [Int64: JobDetails] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await run("""
            SELECT id, app_id, payload::text, push_type, apns_priority::int, expires_at, collapse_id, user_ids, tags
              FROM push.jobs WHERE id = ANY (\(ids))
            """)
        var details: [Int64: JobDetails] = [:]
        for row in rows {
            let (id, appID, payload, pushType, priority, expiresAt, collapseID, userIDs, tags) = try row.decode(
                (Int64, String, String, String, Int, Date?, String?, [String]?, [String]?).self)
            details[id] = JobDetails(
                id: id, appID: appID, payload: Array(payload.utf8), pushType: pushType, apnsPriority: priority,
                expiresAt: expiresAt, collapseID: collapseID, userIDs: userIDs, tags: tags)
        }
        return details
    }

    /// The states of jobs, by id (a cancelled job's chunks in flight stop being retried).
    public func jobStates(_ ids: [Int64]) async throws -> [Int64: String] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await run("SELECT id, state FROM push.jobs WHERE id = ANY (\(ids))")
        var states: [Int64: String] = [:]
        for row in rows {
            let (id, state) = try row.decode((Int64, String).self)
            states[id] = state
        }
        return states
    }

    /// Extends the lease of every chunk this worker holds, and refreshes its registry heartbeat.
    /// Returns the number of live workers (for rate-limit shares).
    public func heartbeat(lease: Duration, liveWindow: Duration) async throws -> Int {
        let leaseSeconds = Double(lease.components.seconds)
        let liveSeconds = Double(liveWindow.components.seconds)
        let rows = try await run("""
            WITH extended AS (
                UPDATE push.chunks SET locked_until = now() + make_interval(secs => \(leaseSeconds))
                 WHERE locked_by = \(workerID)
                RETURNING 1
            ), beat AS (
                UPDATE push.workers SET heartbeat_at = now() WHERE id = \(workerID) RETURNING 1
            )
            SELECT count(*)::int8 FROM push.workers
             WHERE heartbeat_at > now() - make_interval(secs => \(liveSeconds)) OR id = \(workerID)
            """)
        return Int(try rows.first?.decode(Int64.self) ?? 1)
    }

    /// Gives chunks back unsent (graceful shutdown before they started); the claim does not count as an attempt.
    public func release(_ chunkIDs: [Int64]) async throws {
        guard !chunkIDs.isEmpty else { return }
        try await run("""
            UPDATE push.chunks SET locked_by = NULL, locked_until = NULL, claims = greatest(claims - 1, 0)
             WHERE id = ANY (\(chunkIDs)) AND locked_by = \(workerID)
            """)
    }
}
