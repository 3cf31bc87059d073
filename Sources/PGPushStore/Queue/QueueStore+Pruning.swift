import Foundation
import PostgresNIO

extension QueueStore {
    /// A job whose answers tripped the wrong-environment safety valve.
    public struct ValveTrip: Sendable, Hashable {
        public var jobID: Int64
        public var appID: String
        public var answered: Int64
        public var badDeviceTokens: Int64
        public var pausedApp: Bool
    }

    /// Marks jobs where more than `share` of at least `minimumAnswers` answers were BadDeviceToken: the app is
    /// probably pointed at the wrong environment. Their dead-token reports are discarded instead of pruned, and
    /// the app is paused.
    public func tripBadDeviceTokenValve(share: Double, minimumAnswers: Int) async throws -> [ValveTrip] {
        let rows = try await run("""
            WITH tripped AS (
                UPDATE push.jobs SET prune_suppressed = true
                 WHERE NOT prune_suppressed AND answered >= \(minimumAnswers)
                   AND bad_device_tokens > \(share) * answered
                RETURNING id, app_id, answered, bad_device_tokens
            ), paused AS (
                UPDATE push.apps a
                   SET paused_reason = 'BadDeviceToken for ' || round(100.0 * t.bad_device_tokens / t.answered)
                                       || '% of job ' || t.id || '''s answers: the app is probably using the wrong APNs environment ('
                                       || a.environment || ')',
                       paused_at = now(), updated_at = now()
                  FROM tripped t
                 WHERE a.id = t.app_id AND a.paused_reason IS NULL
                RETURNING a.id
            )
            SELECT t.id, t.app_id, t.answered, t.bad_device_tokens, EXISTS (SELECT 1 FROM paused p WHERE p.id = t.app_id)
              FROM tripped t
            """)
        return try rows.map { row in
            let (job, app, answered, bad, paused) = try row.decode((Int64, String, Int64, Int64, Bool).self)
            return ValveTrip(jobID: job, appID: app, answered: answered, badDeviceTokens: bad, pausedApp: paused)
        }
    }

    /// One device the pruner deletes (or, in a dry run, would delete).
    public struct PrunedDevice: Sendable, Hashable {
        public var appID: String
        public var token: String
        public var reason: String
        public var apnsTimestamp: Date?
        public var jobID: Int64
    }

    /// Prunes one batch of reported tokens, off the hot path:
    /// - 410 `Unregistered`/`ExpiredToken`: the device is deleted unless it re-registered after APNs' timestamp;
    /// - `BadDeviceToken`/`DeviceTokenNotForTopic`: deleted once the job's answers show the valve did not trip
    ///   (at least `minimumAnswers` answers, or the job has ended);
    /// - reports from jobs whose valve tripped are discarded, pruning nothing.
    /// Every deletion gets an audit row in `push.pruned_devices`. With `dryRun`, nothing changes.
    public func prune(minimumAnswers: Int, batchSize: Int = 5000, dryRun: Bool = false) async throws -> [PrunedDevice] {
        // Integers formatted here, never user text: the shared CTE can be spliced into both statements.
        let decide = """
            SELECT c.id, c.app_id, c.token, c.reason, c.apns_timestamp, c.job_id, j.prune_suppressed
              FROM push.prune_candidates c JOIN push.jobs j ON j.id = c.job_id
             WHERE j.prune_suppressed OR c.reason IN ('Unregistered', 'ExpiredToken')
                OR j.answered >= \(Int(minimumAnswers)) OR j.state IN ('done', 'failed', 'cancelled')
             ORDER BY c.id
             LIMIT \(Int(batchSize))
            """
        if dryRun {
            let rows = try await run("""
                WITH batch AS (\(unescaped: decide))
                SELECT b.app_id, b.token, b.reason, b.apns_timestamp, b.job_id
                  FROM batch b JOIN push.devices d ON d.app_id = b.app_id AND d.token = b.token
                 WHERE NOT b.prune_suppressed
                   AND (b.apns_timestamp IS NULL OR d.registered_at < b.apns_timestamp)
                """)
            return try rows.map(Self.prunedDevice)
        }
        let rows = try await run("""
            WITH batch AS (\(unescaped: decide)),
            consumed AS (
                DELETE FROM push.prune_candidates c USING batch b WHERE c.id = b.id
                RETURNING b.app_id, b.token, b.reason, b.apns_timestamp, b.job_id, b.prune_suppressed
            ), deleted AS (
                DELETE FROM push.devices d
                 USING (SELECT DISTINCT ON (app_id, token) * FROM consumed WHERE NOT prune_suppressed
                         ORDER BY app_id, token, apns_timestamp DESC NULLS LAST) b
                 WHERE d.app_id = b.app_id AND d.token = b.token
                   AND (b.apns_timestamp IS NULL OR d.registered_at < b.apns_timestamp)
                RETURNING d.app_id, d.token, d.user_id, d.registered_at, b.reason, b.apns_timestamp, b.job_id
            ), audited AS (
                INSERT INTO push.pruned_devices (app_id, token, user_id, reason, apns_timestamp, registered_at, job_id)
                SELECT app_id, token, user_id, reason, apns_timestamp, registered_at, job_id FROM deleted
                RETURNING job_id
            ), counted AS (
                UPDATE push.jobs j SET pruned = j.pruned + a.n
                  FROM (SELECT job_id, count(*) AS n FROM audited GROUP BY job_id) a
                 WHERE j.id = a.job_id
                RETURNING j.id
            )
            SELECT app_id, token, reason, apns_timestamp, job_id FROM deleted
            """)
        return try rows.map(Self.prunedDevice)
    }

    private static func prunedDevice(_ row: PostgresRow) throws -> PrunedDevice {
        let (app, token, reason, timestamp, job) = try row.decode((String, String, String, Date?, Int64).self)
        return PrunedDevice(appID: app, token: token, reason: reason, apnsTimestamp: timestamp, jobID: job)
    }
}
