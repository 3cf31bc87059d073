import Foundation
import PostgresNIO

extension QueueStore {
    /// The wrong-environment safety valve's view of one app: its recent answers and how many were
    /// BadDeviceToken.
    public struct ValveState: Sendable, Hashable {
        public var appID: String
        public var answered: Int64
        public var badDeviceTokens: Int64
        /// True when the share is over the limit: the app is paused and its wrong-token reports suppressed.
        public var tripped: Bool
        /// True when this pass paused the app.
        public var pausedApp: Bool
        /// Reports this pass suppressed.
        public var suppressed: Int64
    }

    /// The app's window: its newest minutes of answers (after its last valve reset, within a week) until they
    /// hold at least `minimumAnswers`. Integers formatted here, never user text, so it can be spliced.
    static func answerWindow(minimumAnswers: Int) -> String {
        """
        SELECT b.app_id, sum(b.answered)::int8 AS answered, sum(b.bad_device_tokens)::int8 AS bad
          FROM (SELECT w.app_id, w.answered, w.bad_device_tokens,
                       sum(w.answered) OVER (PARTITION BY w.app_id ORDER BY w.minute DESC) - w.answered AS newer
                  FROM push.app_answer_window w JOIN push.apps a ON a.id = w.app_id
                 WHERE w.minute >= greatest(now() - interval '7 days', coalesce(a.valve_reset_at, '-infinity'))) b
         WHERE b.newer < \(Int(minimumAnswers))
         GROUP BY b.app_id
        """
    }

    /// Judges every app's window: where more than `share` of at least `minimumAnswers` recent answers were
    /// BadDeviceToken (APNs) or SENDER_ID_MISMATCH (FCM), the app is probably pointed at the wrong environment
    /// or Firebase project: it is paused and its wrong-token reports are suppressed (kept, never pruned on
    /// their own). Returns every app with answers in its window.
    public func judgeBadDeviceTokenValve(share: Double, minimumAnswers: Int) async throws -> [ValveState] {
        let rows = try await run("""
            WITH recent AS (\(unescaped: Self.answerWindow(minimumAnswers: minimumAnswers))),
            tripped AS (
                SELECT * FROM recent WHERE answered >= \(minimumAnswers) AND bad > \(share) * answered
            ), paused AS (
                UPDATE push.apps a
                   SET paused_reason = 'BadDeviceToken safety valve: ' || round(100.0 * t.bad / t.answered)
                                       || '% of the app''s last ' || t.answered || ' answers were BadDeviceToken or SENDER_ID_MISMATCH; '
                                       || 'it is probably using the wrong APNs environment (' || a.environment || ')'
                                       || CASE WHEN a.fcm_project_id IS NOT NULL
                                               THEN ' or the wrong Firebase project (' || a.fcm_project_id || ')' ELSE '' END || '. '
                                       || 'Fix it and resume the app, or confirm a stale audience with pgpush apps confirm-stale',
                       paused_at = now(), updated_at = now()
                  FROM tripped t
                 WHERE a.id = t.app_id AND a.paused_reason IS NULL
                RETURNING a.id
            ), suppressed AS (
                UPDATE push.prune_candidates c SET suppressed = true
                  FROM tripped t
                 WHERE c.app_id = t.app_id AND NOT c.suppressed AND NOT c.confirmed
                   AND c.reason IN ('BadDeviceToken', 'DeviceTokenNotForTopic', 'SENDER_ID_MISMATCH', 'INVALID_ARGUMENT')
                RETURNING c.app_id
            )
            SELECT r.app_id, r.answered, r.bad,
                   r.answered >= \(minimumAnswers) AND r.bad > \(share) * r.answered,
                   EXISTS (SELECT 1 FROM paused p WHERE p.id = r.app_id),
                   (SELECT count(*) FROM suppressed s WHERE s.app_id = r.app_id)::int8
              FROM recent r
            """)
        return try rows.map { row in
            let (app, answered, bad, tripped, paused, suppressed) = try row.decode((String, Int64, Int64, Bool, Bool, Int64).self)
            return ValveState(appID: app, answered: answered, badDeviceTokens: bad, tripped: tripped, pausedApp: paused, suppressed: suppressed)
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
    /// - `BadDeviceToken`/`DeviceTokenNotForTopic`: deleted only while the app's window is healthy (at least
    ///   `minimumAnswers` recent answers, at most `share` of them BadDeviceToken), judged in this same statement,
    ///   so no report slips between the valve's decision and the prune; or once an operator confirmed them;
    /// - suppressed reports (the valve tripped) and reports of apps whose window is not judged yet wait.
    /// Every deletion gets an audit row in `push.pruned_devices`. With `dryRun`, nothing changes.
    public func prune(share: Double = 0.2, minimumAnswers: Int, batchSize: Int = 5000, dryRun: Bool = false) async throws -> [PrunedDevice] {
        // Numbers formatted here, never user text: the shared CTE can be spliced into both statements.
        let decide = """
            SELECT c.id, c.app_id, c.token, c.reason, c.apns_timestamp, c.job_id
              FROM push.prune_candidates c
             WHERE c.reason IN ('Unregistered', 'ExpiredToken', 'UNREGISTERED') OR c.confirmed
                OR (NOT c.suppressed
                    -- The window mixes an app's providers: a wrong Firebase project in a mostly-iOS app stays
                    -- under the share, so FCM's wrong-token reports of such an app wait for an operator.
                    -- The same holds the other way round for APNs' reports of an app with FCM.
                    AND NOT (c.reason IN ('SENDER_ID_MISMATCH', 'INVALID_ARGUMENT')
                             AND EXISTS (SELECT 1 FROM push.apps a WHERE a.id = c.app_id
                                            AND (a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL)))
                    AND NOT (c.reason IN ('BadDeviceToken', 'DeviceTokenNotForTopic')
                             AND EXISTS (SELECT 1 FROM push.apps a WHERE a.id = c.app_id AND a.fcm_project_id IS NOT NULL))
                    AND c.app_id IN (
                        SELECT w.app_id FROM (\(Self.answerWindow(minimumAnswers: minimumAnswers))) w
                         WHERE w.answered >= \(Int(minimumAnswers)) AND w.bad <= \(Double(share)) * w.answered))
             ORDER BY c.id
             LIMIT \(Int(batchSize))
            """
        if dryRun {
            let rows = try await run("""
                WITH batch AS (\(unescaped: decide))
                SELECT b.app_id, b.token, b.reason, b.apns_timestamp, b.job_id
                  FROM batch b JOIN push.devices d ON d.app_id = b.app_id AND d.token = b.token
                 WHERE (b.apns_timestamp IS NULL OR d.registered_at < b.apns_timestamp)
                """)
            return try rows.map(Self.prunedDevice)
        }
        let rows = try await run("""
            WITH batch AS (\(unescaped: decide)),
            consumed AS (
                DELETE FROM push.prune_candidates c USING batch b WHERE c.id = b.id
                RETURNING b.app_id, b.token, b.reason, b.apns_timestamp, b.job_id
            ), deleted AS (
                DELETE FROM push.devices d
                 USING (SELECT DISTINCT ON (app_id, token) * FROM consumed
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
