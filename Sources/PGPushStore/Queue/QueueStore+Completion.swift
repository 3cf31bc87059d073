import Foundation
import PostgresNIO

extension QueueStore {
    /// Records a chunk's outcomes and deletes it, in one transaction:
    /// - the chunk is deleted only if this worker still holds it (`locked_by`), so a worker that lost its lease
    ///   cannot complete a chunk twice; otherwise nothing is written and ``LeaseLost`` is thrown;
    /// - final outcomes are appended to `push.deliveries` in bulk (unnest arrays, no per-token statements);
    /// - transient failures and unsent tokens go back as new 'tokens' chunks (not for a cancelled job);
    /// - dead tokens are queued for the pruner;
    /// - the job's counters move, and the job finishes when its last chunk is gone.
    ///
    /// The job row lock serialises the "last chunk?" check between workers, and makes a concurrent
    /// `push.cancel` (which locks the job first, then deletes the unclaimed chunks) see the retry chunks
    /// inserted here, or makes this completion see the cancellation and insert none.
    public func complete(_ completion: ChunkCompletion) async throws {
        let chunk = completion.chunk
        try await transaction { connection in
            let guarded = try await self.run("""
                DELETE FROM push.chunks WHERE id = \(chunk.id) AND locked_by = \(self.workerID) RETURNING id
                """, on: connection)
            guard !guarded.isEmpty else { throw LeaseLost(chunkID: chunk.id) }

            let outcomes = completion.outcomes
            if !outcomes.isEmpty {
                try await self.run("""
                    INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at)
                    SELECT \(chunk.jobID), \(chunk.appID), o.token, o.status, nullif(o.reason, ''), o.apns_id, o.attempt, o.sent_at
                      FROM unnest(\(outcomes.map(\.token))::text[], \(outcomes.map { Int16(clamping: $0.status) })::int2[],
                                  \(outcomes.map { $0.reason ?? "" })::text[], \(outcomes.map(\.apnsID))::uuid[],
                                  \(outcomes.map { Int16(clamping: $0.attempt) })::int2[], \(outcomes.map(\.sentAt))::timestamptz[])
                           AS o(token, status, reason, apns_id, attempt, sent_at)
                    """, on: connection)
            }

            let state = try await self.run("SELECT state FROM push.jobs WHERE id = \(chunk.jobID) FOR UPDATE", on: connection)
                .first?.decode(String.self)
            let jobActive = state == "running" || state == "queued"

            for batch in completion.requeued where jobActive && !batch.tokens.isEmpty {
                try await self.run("""
                    INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, tokens, attempt, last_reason,
                                             estimated_tokens, next_attempt_at)
                    VALUES (\(chunk.jobID), \(chunk.appID), \(chunk.priority), \(chunk.seq), 'tokens', \(batch.tokens),
                            \(batch.attempt), \(batch.lastReason), \(batch.tokens.count), \(batch.notBefore))
                    """, on: connection)
            }

            let candidates = completion.pruneCandidates
            if !candidates.isEmpty {
                try await self.run("""
                    INSERT INTO push.prune_candidates (app_id, token, job_id, status, reason, apns_timestamp)
                    SELECT \(chunk.appID), c.token, \(chunk.jobID), c.status, c.reason,
                           CASE WHEN c.ts_ms >= 0 THEN to_timestamp(c.ts_ms / 1000.0) END
                      FROM unnest(\(candidates.map(\.token))::text[], \(candidates.map { Int16(clamping: $0.status) })::int2[],
                                  \(candidates.map(\.reason))::text[],
                                  \(candidates.map { $0.apnsTimestamp.map { Int64($0.timeIntervalSince1970 * 1000) } ?? -1 })::int8[])
                           AS c(token, status, reason, ts_ms)
                    """, on: connection)
            }

            let delivered = outcomes.count { $0.status == 200 }
            let expired = outcomes.count { $0.status == 0 && $0.reason == ChunkCompletion.expiredReason }
            let failed = outcomes.count - delivered - expired
            let firstSent = outcomes.lazy.filter { $0.status != 0 }.map(\.sentAt).min()
            try await self.run("""
                UPDATE push.jobs
                   SET delivered = delivered + \(delivered), failed = failed + \(failed), expired = expired + \(expired),
                       answered = answered + \(completion.answered),
                       bad_device_tokens = bad_device_tokens + \(completion.badDeviceTokens),
                       first_sent_at = least(first_sent_at, \(firstSent)::timestamptz)
                 WHERE id = \(chunk.jobID)
                """, on: connection)
            // The job row is locked above, so of two workers finishing a job's last two chunks, the second one
            // to get here sees both chunks gone.
            try await self.run("""
                UPDATE push.jobs
                   SET state = CASE WHEN delivered = 0 AND failed + expired > 0 THEN 'failed' ELSE 'done' END,
                       finished_at = now()
                 WHERE id = \(chunk.jobID) AND state = 'running'
                   AND NOT EXISTS (SELECT 1 FROM push.chunks WHERE job_id = \(chunk.jobID))
                """, on: connection)
        }
    }
}
