import Foundation
import PostgresNIO

extension QueueStore {
    /// What expanding one job did.
    public struct Expansion: Sendable, Hashable {
        public var jobID: Int64
        public var appID: String
        public var total: Int64
        public var chunks: Int
    }

    /// Expands the most urgent due job into chunks, if there is one: a key range per `chunkSize` devices of the
    /// audience, or slices of an explicit token list. It writes no per-token rows: a million devices become a
    /// thousand small chunk rows. Returns `nil` when no queued job is due.
    public func expandNextDueJob(chunkSize: Int) async throws -> Expansion? {
        try await transaction { connection in
            let due = try await self.run("""
                SELECT j.id, j.app_id, j.priority, j.tokens IS NOT NULL, j.send_at, j.user_ids, j.tags
                  FROM push.jobs j
                  JOIN push.apps a ON a.id = j.app_id AND a.paused_reason IS NULL
                 WHERE j.state = 'queued' AND j.send_at <= now()
                 ORDER BY j.priority DESC, j.send_at, j.id
                 LIMIT 1
                   FOR UPDATE OF j SKIP LOCKED
                """, on: connection)
            guard let row = due.first else { return nil }
            let (jobID, appID, priority, explicit, sendAt, userIDs, tags) =
                try row.decode((Int64, String, Int, Bool, Date, [String]?, [String]?).self)
            let size = max(1, chunkSize)

            let counts: [PostgresRow]
            if explicit {
                counts = try await self.run("""
                    WITH numbered AS (
                        SELECT t.token, t.ord, ((t.ord - 1) / \(size))::int AS seq
                          FROM push.jobs j, unnest(j.tokens) WITH ORDINALITY AS t(token, ord)
                         WHERE j.id = \(jobID)
                    ), inserted AS (
                        INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, tokens, estimated_tokens, next_attempt_at)
                        SELECT \(jobID), \(appID), \(priority), seq, 'tokens', array_agg(token ORDER BY ord), count(*)::int, \(sendAt)
                          FROM numbered GROUP BY seq
                        RETURNING estimated_tokens
                    )
                    SELECT coalesce(sum(estimated_tokens), 0)::int8, count(*)::int8 FROM inserted
                    """, on: connection)
            } else {
                // Upper bounds every `size` tokens of the audience, in key order. The first chunk's lower bound and
                // the last chunk's upper bound stay open. The audience filters are bound as parameters, so the
                // planner drops the ones that are NULL and a user or tag audience uses its index instead of
                // scanning every device of the app.
                counts = try await self.run("""
                    WITH audience AS (
                        SELECT d.token, row_number() OVER (ORDER BY d.token) AS n, count(*) OVER () AS total
                          FROM push.devices d
                         WHERE d.app_id = \(appID)
                           AND (\(userIDs)::text[] IS NULL OR d.user_id = ANY (\(userIDs)::text[]))
                           AND (\(tags)::text[] IS NULL OR d.tags && \(tags)::text[])
                    ), bounds AS (
                        SELECT token, n, total FROM audience WHERE n % \(size) = 0 OR n = total
                    ), ranges AS (
                        SELECT (row_number() OVER (ORDER BY token) - 1)::int AS seq,
                               lag(token) OVER (ORDER BY token) AS lo,
                               CASE WHEN n = total THEN NULL ELSE token END AS hi,
                               (n - coalesce(lag(n) OVER (ORDER BY token), 0))::int AS estimated
                          FROM bounds
                    ), inserted AS (
                        INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, lo_token, hi_token, estimated_tokens, next_attempt_at)
                        SELECT \(jobID), \(appID), \(priority), seq, 'range', lo, hi, estimated, \(sendAt) FROM ranges
                        RETURNING estimated_tokens
                    )
                    SELECT coalesce(sum(estimated_tokens), 0)::int8, count(*)::int8 FROM inserted
                    """, on: connection)
            }
            let (total, chunks) = try counts[0].decode((Int64, Int64).self)
            // An empty audience has nothing to send: the job is done as soon as it starts.
            try await self.run("""
                UPDATE push.jobs
                   SET state = CASE WHEN \(total) = 0 THEN 'done' ELSE 'running' END,
                       total = \(total), started_at = now(),
                       finished_at = CASE WHEN \(total) = 0 THEN now() END
                 WHERE id = \(jobID)
                """, on: connection)
            return Expansion(jobID: jobID, appID: appID, total: total, chunks: Int(chunks))
        }
    }
}
