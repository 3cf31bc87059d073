import Foundation
import PostgresNIO

extension QueueStore {
    /// The advisory lock that elects one maintenance leader per database at a time.
    static let maintenanceLockKey: Int64 = 0x7067_7075_7368_6d74

    /// What one maintenance pass did.
    public struct MaintenanceReport: Sendable, Hashable {
        public var ranAsLeader: Bool
        public var partitionsCreated: Int = 0
        public var jobsFinished: Int = 0
        public var workersRemoved: Int = 0
        public var chunksOfEndedJobsDropped: Int = 0
    }

    /// One maintenance pass, run only by the worker that wins a transaction-scoped advisory lock: creates
    /// upcoming delivery partitions, finishes running jobs with no chunks left (a backstop for a crash between
    /// statements of another worker's completion), and forgets workers whose heartbeat stopped long ago.
    public func maintain(deadWorkerAfter: Duration) async throws -> MaintenanceReport {
        let deadSeconds = Double(deadWorkerAfter.components.seconds)
        return try await transaction { connection in
            let leader = try await self.run(
                "SELECT pg_try_advisory_xact_lock(\(Self.maintenanceLockKey))", on: connection
            ).first?.decode(Bool.self) ?? false
            guard leader else { return MaintenanceReport(ranAsLeader: false) }
            var report = MaintenanceReport(ranAsLeader: true)
            report.partitionsCreated = Int(
                try await self.run("SELECT push.ensure_delivery_partitions(3)", on: connection).first?.decode(Int32.self) ?? 0)
            report.jobsFinished = try await self.run("""
                UPDATE push.jobs j
                   SET state = CASE WHEN failure_reason IS NOT NULL OR (delivered = 0 AND failed + expired > 0)
                                    THEN 'failed' ELSE 'done' END,
                       finished_at = now()
                 WHERE j.state = 'running' AND NOT EXISTS (SELECT 1 FROM push.chunks c WHERE c.job_id = j.id)
                RETURNING j.id
                """, on: connection).count
            // A cancelled job's chunks that a dead worker held: dropped once their lease ran out, never sent.
            report.chunksOfEndedJobsDropped = try await self.run("""
                DELETE FROM push.chunks c USING push.jobs j
                 WHERE j.id = c.job_id AND j.state NOT IN ('queued', 'running')
                   AND (c.locked_by IS NULL OR c.locked_until < now())
                RETURNING c.id
                """, on: connection).count
            report.workersRemoved = try await self.run("""
                DELETE FROM push.workers WHERE heartbeat_at < now() - make_interval(secs => \(deadSeconds)) RETURNING id
                """, on: connection).count
            return report
        }
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
