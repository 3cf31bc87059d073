import Foundation
import PGPushCore
import PostgresNIO

/// One row of `push.delivery_stats` summed over days: how many outcomes had this status and reason.
public struct DeliveryOutcome: Sendable {
    public var status: Int
    public var reason: String?
    public var count: Int64
    public var platform: String = "ios"

    public init(status: Int, reason: String?, count: Int64, platform: String = "ios") {
        (self.status, self.reason, self.count, self.platform) = (status, reason, count, platform)
    }
}

/// The rig's jobs: enqueued the way an application would, polled, and measured.
extension RigStore {
    /// A job to every device of the app (or to those of `userIDs`, or those with all of `tags`); its id. With
    /// `localized` (a JSON object from locale to partial payload) or `badge` (`increment`), a job with
    /// per-device content.
    public func enqueue(
        appID: String, payload: String, userIDs: [String]? = nil, tags: [String]? = nil, priority: Int = 0,
        pushType: String? = nil, localized: String? = nil, badge: String? = nil, maxRate: Int? = nil
    ) async throws -> Int64? {
        try await run("""
            SELECT push.enqueue(\(appID), \(payload)::jsonb, user_ids => \(userIDs), tags => \(tags),
                                priority => \(priority)::int, push_type => \(pushType)::text,
                                localized => \(localized)::jsonb, badge => \(badge)::text, max_rate => \(maxRate)::int)
            """).first?.decode(Int64.self)
    }

    /// One job per user, all in ONE transaction with one statement, as a producer's batch would.
    public func enqueueOnePerUser(appID: String, payload: String, users: [String], priority: Int) async throws -> [Int64] {
        try await run("BEGIN")
        let ids = try await run("""
            SELECT push.enqueue(\(appID), \(payload)::jsonb, user_ids => ARRAY[u], priority => \(priority)::int)
              FROM unnest(\(users)::text[]) u
            """).map { try $0.decode(Int64.self) }
        try await run("COMMIT")
        return ids
    }

    /// One job for one user, in its own (autocommit) statement.
    public func enqueue(appID: String, payload: String, user: String, priority: Int) async throws -> Int64? {
        try await run("""
            SELECT push.enqueue(\(appID), \(payload)::jsonb, user_ids => ARRAY[\(user)], priority => \(priority)::int)
            """).first?.decode(Int64.self)
    }

    /// How many of `jobs` are in each state.
    public func jobStates(_ jobs: [Int64]) async throws -> [String: Int] {
        try Self.stateCounts(try await run("SELECT state, count(*) FROM push.jobs WHERE id = ANY(\(jobs)) GROUP BY state"))
    }

    /// How many of `jobs` (all of the app's) are still queued or running, per state, read through the active-jobs
    /// index. `listed` is empty when the ids are the whole run from `first` to `last`.
    public func unfinishedJobStates(appID: String, first: Int64, last: Int64, listed: [Int64]) async throws -> [String: Int] {
        try Self.stateCounts(try await run("""
            SELECT state, count(*) FROM push.jobs
             WHERE app_id = \(appID) AND state IN ('queued', 'running') AND id BETWEEN \(first) AND \(last)
               AND (cardinality(\(listed)::int8[]) = 0 OR id = ANY(\(listed)::int8[]))
             GROUP BY state
            """))
    }

    /// Enqueue→first send (`push.job_latency`) of each of `jobs` that sent something, in seconds.
    public func firstSendLatencies(_ jobs: [Int64]) async throws -> [Double] {
        try await run("""
            SELECT extract(epoch FROM enqueue_to_first_send)::float8 FROM push.job_latency
             WHERE job_id = ANY(\(jobs)) AND enqueue_to_first_send IS NOT NULL
            """).map { try $0.decode(Double.self) }
    }

    /// The job's state and enqueue→first send in seconds (nil before its first send); `nil` for an unknown job.
    public func stateAndLatency(_ job: Int64) async throws -> (state: String, latency: Double?)? {
        let rows = try await run("""
            SELECT j.state, extract(epoch FROM l.enqueue_to_first_send)::float8
              FROM push.jobs j JOIN push.job_latency l ON l.job_id = j.id WHERE j.id = \(job)
            """)
        guard let row = rows.first else { return nil }
        let (state, latency) = try row.decode((String, Double?).self)
        return (state, latency)
    }

    /// Rows of `push.deliveries` for `jobs`, and how many distinct jobs they belong to.
    public func outcomeCounts(_ jobs: [Int64]) async throws -> (rows: Int, jobs: Int) {
        let rows = try await run("SELECT count(*), count(DISTINCT job_id) FROM push.deliveries WHERE job_id = ANY(\(jobs))")
        guard let row = rows.first else { return (0, 0) }
        let (count, distinct) = try row.decode((Int64, Int64).self)
        return (Int(count), Int(distinct))
    }

    /// The job's first send time is known: a worker has written its first outcomes.
    public func hasSent(_ job: Int64) async throws -> Bool {
        try await run("SELECT first_sent_at IS NOT NULL FROM push.jobs WHERE id = \(job)").first?.decode(Bool.self) ?? false
    }

    /// Dead-token reports of the job the pruner has not handled yet.
    public func pendingPruneCandidates(_ job: Int64) async throws -> Int64? {
        try await run("SELECT count(*) FROM push.prune_candidates WHERE job_id = \(job)").first?.decode(Int64.self)
    }

    /// The app's outcomes by platform, status and reason (all days).
    public func deliveryOutcomes(appID: String) async throws -> [DeliveryOutcome] {
        try await run("""
            SELECT status::int, reason, sum(count)::bigint, platform FROM push.delivery_stats
             WHERE app_id = \(appID) GROUP BY platform, status, reason ORDER BY platform DESC, status, reason NULLS FIRST
            """).map { row in
            let (status, reason, count, platform) = try row.decode((Int, String?, Int64, String).self)
            return DeliveryOutcome(status: status, reason: reason, count: count, platform: platform)
        }
    }

    /// Seconds from the job's first claim (`started_at`) to its last write (`finished_at`).
    public func jobDuration(_ job: Int64) async throws -> Double? {
        try await run("""
            SELECT extract(epoch FROM finished_at - started_at)::float8 FROM push.jobs WHERE id = \(job)
            """).first?.decode(Double?.self)
    }

    /// Seconds from the first of `jobs` being created to the last one finishing.
    public func jobsSpan(_ jobs: [Int64]) async throws -> Double? {
        try await run("""
            SELECT extract(epoch FROM max(finished_at) - min(created_at))::float8 FROM push.jobs WHERE id = ANY(\(jobs))
            """).first?.decode(Double?.self)
    }

    /// The database's clock now: a mark that `finished_at`, written by the same server, can be compared with.
    public func databaseClock() async throws -> Date {
        guard let now = try await run("SELECT clock_timestamp()").first?.decode(Date.self) else {
            throw PGPushError(.internal, "the database did not tell its time")
        }
        return now
    }

    /// How many of `jobs` finished after `mark`, and the seconds from `mark` to the last of them: the queue's
    /// drain once the producers are done.
    public func finished(_ jobs: [Int64], after mark: Date) async throws -> (jobs: Int64, seconds: Double?) {
        let rows = try await run("""
            SELECT count(*) FILTER (WHERE finished_at > \(mark)),
                   extract(epoch FROM max(finished_at) - \(mark)::timestamptz)::float8
              FROM push.jobs WHERE id = ANY(\(jobs))
            """)
        guard let row = rows.first else { return (0, nil) }
        let (count, seconds) = try row.decode((Int64, Double?).self)
        return (count, seconds)
    }

    /// How many of `jobs` were enqueued, and how many first sent, before the broadcast `job` finished.
    public func overlap(of jobs: [Int64], withBroadcast job: Int64) async throws -> (enqueued: Int64, sent: Int64) {
        let rows = try await run("""
            SELECT count(*) FILTER (WHERE j.created_at < b.finished_at),
                   count(*) FILTER (WHERE j.first_sent_at < b.finished_at)
              FROM push.jobs j, push.jobs b
             WHERE j.id = ANY(\(jobs)) AND b.id = \(job)
            """)
        guard let row = rows.first else { return (0, 0) }
        let (enqueued, sent) = try row.decode((Int64, Int64).self)
        return (enqueued, sent)
    }
}
