import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// The name of the maintenance leader's row in `push.leader_leases`.
    static let maintenanceLeaseName = "maintenance"

    /// What one maintenance pass did.
    public struct MaintenanceReport: Sendable, Hashable {
        public var ranAsLeader: Bool
        public var partitionsCreated: Int = 0
        public var jobsFinished: Int = 0
        public var workersRemoved: Int = 0
        public var chunksOfEndedJobsDropped: Int = 0
        public var jobsRemoved: Int = 0
        public var auditRowsRemoved: Int = 0
        public var pruneCandidatesRemoved: Int = 0
    }

    /// Takes or renews the maintenance leadership for `lease`, and says whether this process holds it.
    ///
    /// Leadership is a row in `push.leader_leases`, not a session advisory lock: through PgBouncer in
    /// transaction pooling every statement may run on another server connection, and a session lock would be
    /// released, or kept, behind the holder's back. The holder renews the row each pass, and its heartbeat
    /// renews it in between (``heartbeat(lease:liveWindow:holding:)``), however long a pass takes; anyone takes
    /// it once it has run out, so a leader that died is replaced within one lease. One statement decides, so two workers can never both be told they lead.
    public func acquireMaintenanceLeadership(lease: Duration) async throws -> Bool {
        let seconds = lease.inSeconds
        let rows = try await run("""
            INSERT INTO push.leader_leases AS l (name, holder, expires_at)
            VALUES (\(Self.maintenanceLeaseName), \(leaseOwner), now() + make_interval(secs => \(seconds)))
            ON CONFLICT (name) DO UPDATE
               SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
                   taken_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.taken_at ELSE now() END
             WHERE l.holder = EXCLUDED.holder OR l.expires_at < now()
            RETURNING holder
            """)
        return !rows.isEmpty
    }

    /// Gives the leadership up at once (a graceful shutdown), so the next leader need not wait out the lease.
    public func releaseMaintenanceLeadership(deadline: Duration = QueueStore.deadline) async throws {
        try await run("""
            DELETE FROM push.leader_leases WHERE name = \(Self.maintenanceLeaseName) AND holder = \(leaseOwner)
            """, deadline: deadline)
    }

    /// The five queue-upkeep tasks once, in order, each in its own statement or transaction, as the worker's
    /// maintenance services run them (each on its own schedule): ``createDeliveryPartitions()``,
    /// ``finishDrainedJobs()``, ``dropChunksOfEndedJobs()``, ``trimAnswerWindow()`` and
    /// ``removeDeadWorkers(silentFor:)``. For tools and tests that want one pass; one task's failure ends it.
    public func maintain(deadWorkerAfter: Duration) async throws -> MaintenanceReport {
        var report = MaintenanceReport(ranAsLeader: true)
        report.partitionsCreated = try await createDeliveryPartitions()
        report.jobsFinished = try await finishDrainedJobs()
        report.chunksOfEndedJobsDropped = try await dropChunksOfEndedJobs()
        try await trimAnswerWindow()
        report.workersRemoved = try await removeDeadWorkers(silentFor: deadWorkerAfter)
        return report
    }

    /// How far ahead ``createDeliveryPartitions()`` keeps daily partitions of `push.deliveries`, in days.
    static let deliveryPartitionDaysAhead = 3

    /// Creates the upcoming daily partitions of `push.deliveries` (days ahead), returning how many it made.
    ///
    /// It waits at most 2 s for a lock (`lock_timeout`): an analyst's long query on `push.deliveries` must never
    /// hold maintenance, let alone completions, behind the partition's lock. A pass that waited too long logs a
    /// warning and makes none (0); the next pass tries again, days before a partition is needed.
    @discardableResult
    public func createDeliveryPartitions() async throws -> Int {
        do {
            return try await transaction { connection in
                try await self.run("SET LOCAL lock_timeout = '2s'", on: connection)
                let rows = try await self.run(
                    "SELECT push.ensure_delivery_partitions(\(Int32(Self.deliveryPartitionDaysAhead)))", on: connection)
                return Int(try rows.first?.decode(Int32.self) ?? 0)
            }
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" {  // lock_not_available
            logger.warning("creating delivery partitions waited too long for a lock; trying again next pass")
            return 0
        }
    }

    /// Finishes running jobs with no chunk left, by the job's final-state rule (``JobFinalState``), returning
    /// how many. The completion that writes a job's last chunk finishes it; this is the backstop for a crash
    /// between statements of another worker's completion.
    @discardableResult
    public func finishDrainedJobs() async throws -> Int {
        // A set difference reads the running jobs and the queue once each. As an anti-join, statistics taken
        // while nothing ran made the planner scan every chunk once per running job: 2.4 s a pass with 1,400
        // one-user jobs running beside a broadcast, holding their rows against the completions.
        try await run("""
            UPDATE push.jobs j
               SET state = \(unescaped: JobFinalState.sql(ofJob: "j")),
                   finished_at = now()
              FROM (SELECT r.id FROM push.jobs r WHERE r.state = 'running'
                    EXCEPT
                    SELECT c.job_id FROM push.chunks c) AS drained
             WHERE j.id = drained.id AND j.state = 'running'
            RETURNING j.id
            """).count
    }

    /// Drops the chunks of ended jobs that nobody holds (a cancelled job's chunks that a dead worker held,
    /// once their lease ran out), never sending them, and returns how many. Their tokens leave the job's total
    /// for `cancelled_tokens`, as `push.cancel` does with the chunks nobody held, so that the total stays the
    /// sum of the job's outcomes.
    @discardableResult
    public func dropChunksOfEndedJobs() async throws -> Int {
        // The job is probed per chunk (the queue is small; finished jobs are many): a join let the planner
        // scan every job kept for retention, 340 ms a pass with 300,000 of them.
        try await run("""
            WITH dropped AS (
                DELETE FROM push.chunks c
                 WHERE (c.locked_by IS NULL OR c.locked_until < now())
                   AND (SELECT j.state FROM push.jobs j WHERE j.id = c.job_id) NOT IN ('queued', 'running')
                RETURNING c.id, c.job_id, c.estimated_tokens, c.platform
            ), per_job AS (
                SELECT job_id, sum(estimated_tokens)::int8 AS tokens,
                       coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'android'), 0)::int8 AS android,
                       coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'web'), 0)::int8 AS web
                  FROM dropped GROUP BY job_id
            ), counted AS (
                UPDATE push.jobs j
                   SET total = j.total - per_job.tokens, android_total = j.android_total - per_job.android,
                       web_total = j.web_total - per_job.web,
                       cancelled_tokens = j.cancelled_tokens + per_job.tokens
                  FROM per_job
                 WHERE j.id = per_job.job_id
            )
            SELECT id FROM dropped
            """).count
    }

    /// Forgets the minutes of the wrong-environment valve's answer window (`push.app_answer_window`) older
    /// than 7 days, returning how many.
    @discardableResult
    public func trimAnswerWindow() async throws -> Int {
        try await run("DELETE FROM push.app_answer_window WHERE minute < now() - interval '7 days' RETURNING app_id").count
    }

    /// Forgets workers whose heartbeat stopped `silentFor` ago or longer (`push.workers`; the live ones share
    /// the rate limits), returning how many.
    @discardableResult
    public func removeDeadWorkers(silentFor: Duration) async throws -> Int {
        let deadSeconds = Double(silentFor.components.seconds)
        return try await run("""
            DELETE FROM push.workers WHERE heartbeat_at < now() - make_interval(secs => \(deadSeconds)) RETURNING id
            """).count
    }

    /// Retention, one small batch of each kind: finished jobs, pruning audit rows and prune candidates older
    /// than `keep`. Each batch is found through an index and deleted by primary key, so a pass stays short
    /// however large the tables are; maintenance runs it every pass until little is left.
    /// `push.deliveries` is not touched here: its daily partitions are dropped whole
    /// (`push.drop_delivery_partitions`).
    public func removeExpired(olderThan keep: Duration, batchSize: Int = 1000) async throws -> MaintenanceReport {
        var report = MaintenanceReport(ranAsLeader: true)
        let seconds = keep.inSeconds
        // A finished job should have no chunks left; should one remain, it goes with its job, since push.chunks
        // has no foreign key to cascade (migration 0014).
        report.jobsRemoved = try await run("""
            WITH removed AS (
                DELETE FROM push.jobs WHERE id IN (
                    SELECT id FROM push.jobs
                     WHERE state IN ('done', 'failed', 'cancelled') AND finished_at < now() - make_interval(secs => \(seconds))
                     ORDER BY finished_at LIMIT \(batchSize))
                RETURNING id
            ), leftover AS (
                DELETE FROM push.chunks WHERE job_id IN (SELECT id FROM removed)
            )
            SELECT id FROM removed
            """).count
        report.auditRowsRemoved = try await run("""
            DELETE FROM push.pruned_devices WHERE id IN (
                SELECT id FROM push.pruned_devices WHERE pruned_at < now() - make_interval(secs => \(seconds))
                 ORDER BY pruned_at LIMIT \(batchSize))
            RETURNING id
            """).count
        report.pruneCandidatesRemoved = try await run("""
            DELETE FROM push.prune_candidates WHERE id IN (
                SELECT id FROM push.prune_candidates WHERE reported_at < now() - make_interval(secs => \(seconds))
                 ORDER BY reported_at LIMIT \(batchSize))
            RETURNING id
            """).count
        return report
    }

    /// Tokens still to send, per app, and the age of the oldest job with work left (for metrics).
    public func backlog() async throws -> [(appID: String, tokens: Int64, oldestAgeSeconds: Double)] {
        let rows = try await run("SELECT app_id, backlog_tokens, oldest_age_seconds FROM push.queue_backlog")
        return try rows.map { row in
            let (app, tokens, age) = try row.decode((String, Int64, Double).self)
            return (app, tokens, age)
        }
    }
}
