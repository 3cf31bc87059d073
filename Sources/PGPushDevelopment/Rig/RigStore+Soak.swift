import Foundation
import PostgresNIO

/// What `pgpush bench soak` reads each interval and at the end: the one-token jobs that finished, the
/// broadcasts' progress, the tables' sizes, and whether every job has exactly one outcome per token.
extension RigStore {
    /// One-token jobs (those addressed to `user_ids`) of the app that finished from `since` (`nil`: ever) until
    /// one second before the database's time now, with the percentiles of their enqueue→first send. The
    /// returned `until` is what the next call passes as `since`. The second's lag lets a worker's write that
    /// began before this call (its `finished_at` is its transaction's start) commit before its interval is
    /// read, so that it is not missed by both. Reads through the finished-jobs index.
    public struct FinishedInterval: Sendable {
        public var until: Date
        public var jobs: Int
        public var p50Seconds: Double?
        public var p99Seconds: Double?
    }

    public func finishedOneTokenJobs(appID: String, since: Date?) async throws -> FinishedInterval {
        guard let bound = try await run("SELECT now() - interval '1 second'").first else { throw SoakQueryError() }
        let until = try bound.decode(Date.self)
        let rows = try await run("""
            SELECT count(*)::int8,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM first_sent_at - greatest(created_at, send_at))::float8),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM first_sent_at - greatest(created_at, send_at))::float8)
              FROM push.jobs
             WHERE state IN ('done', 'failed', 'cancelled') AND finished_at >= coalesce(\(since)::timestamptz, '-infinity')
               AND finished_at < \(until) AND app_id = \(appID) AND user_ids IS NOT NULL AND first_sent_at IS NOT NULL
            """)
        guard let row = rows.first else { throw SoakQueryError() }
        let (count, p50, p99) = try row.decode((Int64, Double?, Double?).self)
        return FinishedInterval(until: until, jobs: Int(count), p50Seconds: p50, p99Seconds: p99)
    }

    /// Outcomes (delivered + failed) of `jobs` so far, summed: the broadcasts' progress.
    public func processedTokens(_ jobs: [Int64]) async throws -> Int64 {
        guard !jobs.isEmpty else { return 0 }
        return try await run("""
            SELECT coalesce(sum(delivered + failed), 0)::int8 FROM push.jobs WHERE id = ANY(\(jobs))
            """).first?.decode(Int64.self) ?? 0
    }

    /// Jobs of the app still queued or running (through the active-jobs index).
    public func unfinishedJobs(appID: String) async throws -> Int {
        Int(try await run("""
            SELECT count(*)::int8 FROM push.jobs WHERE app_id = \(appID) AND state IN ('queued', 'running')
            """).first?.decode(Int64.self) ?? 0)
    }

    /// One table's size, its partitions included.
    public struct TableSize: Sendable {
        public var name: String
        /// Heap, free-space map, visibility map and TOAST (`pg_table_size`), summed over the partitions.
        public var tableBytes: Int64
        /// `pg_indexes_size`, summed over the partitions.
        public var indexBytes: Int64
        /// `pg_stat_user_tables.n_dead_tup` and `n_live_tup`, summed over the partitions.
        public var deadTuples: Int64
        public var liveTuples: Int64
    }

    /// Sizes of `push.<name>` for each of `tables`, partitions included (`pg_partition_tree`; a partitioned parent
    /// has no storage of its own).
    public func tableSizes(_ tables: [String]) async throws -> [TableSize] {
        try await run("""
            SELECT t.name, coalesce(sum(pg_table_size(p.relid)), 0)::int8, coalesce(sum(pg_indexes_size(p.relid)), 0)::int8,
                   coalesce(sum(s.n_dead_tup), 0)::int8, coalesce(sum(s.n_live_tup), 0)::int8
              FROM unnest(\(tables)::text[]) WITH ORDINALITY t(name, position)
              CROSS JOIN LATERAL (
                    -- A table that is not partitioned has no partition tree: then it is its own one member.
                    SELECT relid FROM pg_partition_tree(('push.' || t.name)::regclass)
                    UNION SELECT ('push.' || t.name)::regclass
                  ) p
              LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid
             GROUP BY t.name, t.position ORDER BY t.position
            """).map { row in
            let (name, table, index, dead, live) = try row.decode((String, Int64, Int64, Int64, Int64).self)
            return TableSize(name: name, tableBytes: table, indexBytes: index, deadTuples: dead, liveTuples: live)
        }
    }

    /// Every job of an app against its outcome rows in `push.deliveries`.
    public struct OutcomeAudit: Sendable {
        /// Jobs of the app, and of those the one-token (user) jobs and the broadcasts (tag jobs).
        public var jobs: Int
        public var oneTokenJobs: Int
        public var broadcasts: Int
        /// Jobs not done, failed or cancelled.
        public var unfinished: Int
        /// Rows of `push.deliveries` for the app's jobs.
        public var outcomeRows: Int64
        /// Rows beyond the first for the same (job, token).
        public var duplicateOutcomes: Int64
        /// Tokens a job targeted (its `total`) without an outcome row.
        public var missingOutcomes: Int64
        /// Jobs whose outcome rows differ from their `total`, or whose total is unknown.
        public var jobsWithWrongCount: Int
        /// One-token jobs whose total is not 1.
        public var oneTokenJobsNotOneToken: Int
        /// Broadcasts whose total is not `broadcastAudience`.
        public var broadcastsWithOtherAudience: Int

        /// Every job finished with exactly one outcome per token it targeted.
        public var exactlyOnce: Bool {
            jobs > 0 && unfinished == 0 && duplicateOutcomes == 0 && missingOutcomes == 0 && jobsWithWrongCount == 0
                && oneTokenJobsNotOneToken == 0 && broadcastsWithOtherAudience == 0
        }
    }

    /// Checks every job of the app: finished, outcome rows equal to its total, one row per (job, token), one-token
    /// jobs of total 1 and broadcasts (tag jobs) of total `broadcastAudience`. Reads all of the app's outcomes.
    public func auditOutcomes(appID: String, broadcastAudience: Int) async throws -> OutcomeAudit {
        let rows = try await run("""
            WITH o AS (
                SELECT job_id, count(*) AS rows, count(DISTINCT token) AS tokens
                  FROM push.deliveries WHERE app_id = \(appID) GROUP BY job_id
            )
            SELECT count(*)::int8,
                   count(*) FILTER (WHERE j.user_ids IS NOT NULL)::int8,
                   count(*) FILTER (WHERE j.tags IS NOT NULL)::int8,
                   count(*) FILTER (WHERE j.state NOT IN ('done', 'failed', 'cancelled'))::int8,
                   coalesce(sum(o.rows), 0)::int8,
                   coalesce(sum(o.rows - o.tokens), 0)::int8,
                   coalesce(sum(greatest(coalesce(j.total, 0) - coalesce(o.tokens, 0), 0)), 0)::int8,
                   count(*) FILTER (WHERE j.total IS NULL OR coalesce(o.rows, 0) <> j.total)::int8,
                   count(*) FILTER (WHERE j.user_ids IS NOT NULL AND j.total IS DISTINCT FROM 1)::int8,
                   count(*) FILTER (WHERE j.tags IS NOT NULL AND j.total IS DISTINCT FROM \(Int64(broadcastAudience)))::int8
              FROM push.jobs j LEFT JOIN o ON o.job_id = j.id
             WHERE j.app_id = \(appID)
            """)
        guard let row = rows.first else { throw SoakQueryError() }
        let (jobs, oneToken, broadcasts, unfinished, outcomeRows, duplicates, missing, wrong, notOne, otherAudience) =
            try row.decode((Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self)
        return OutcomeAudit(
            jobs: Int(jobs), oneTokenJobs: Int(oneToken), broadcasts: Int(broadcasts), unfinished: Int(unfinished),
            outcomeRows: outcomeRows, duplicateOutcomes: duplicates, missingOutcomes: missing, jobsWithWrongCount: Int(wrong),
            oneTokenJobsNotOneToken: Int(notOne), broadcastsWithOtherAudience: Int(otherAudience))
    }

    /// Enqueue→first send p99 (and how many jobs) of the app's one-token jobs enqueued between `from` and `to`
    /// (database times).
    public func oneTokenLatencyP99(appID: String, from: Date, to: Date) async throws -> (jobs: Int, p99Seconds: Double?) {
        let rows = try await run("""
            SELECT count(*)::int8,
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM first_sent_at - greatest(created_at, send_at))::float8)::float8
              FROM push.jobs
             WHERE app_id = \(appID) AND user_ids IS NOT NULL AND first_sent_at IS NOT NULL
               AND created_at >= \(from) AND created_at < \(to)
            """)
        guard let row = rows.first else { return (0, nil) }
        let (count, p99) = try row.decode((Int64, Double?).self)
        return (Int(count), p99)
    }

    /// The database's clock.
    public func now() async throws -> Date {
        guard let row = try await run("SELECT now()").first else { throw SoakQueryError() }
        return try row.decode(Date.self)
    }
}

/// A statement that always returns a row returned none.
private struct SoakQueryError: Error, CustomStringConvertible {
    var description: String { "the database returned no row" }
}
