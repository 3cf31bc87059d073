import Foundation
import PostgresNIO

/// One app's page: its settings, its pause and who made it, its safety valve, its recent failures.
public struct DashboardAppDetail: Sendable, Codable {
    public var id: String
    public var topic: String?
    public var environment: String
    /// `token` (.p8), `certificate`, or `none` for an Android-only app; FCM is listed beside it.
    public var apnsAuth: String
    public var fcmProjectID: String?
    /// Web Push (migration 0027): whether the app has a VAPID private key (workers send to its web devices),
    /// its VAPID public key (the website's `applicationServerKey`, base64url) and its subject.
    public var webPushConfigured: Bool
    public var vapidPublicKey: String?
    public var vapidSubject: String?
    /// Set by the workers when a push service refused the app's VAPID credential (401/403): only its Web Push
    /// waits, APNs and FCM keep sending. Independent of ``pausedReason``, the whole app's pause.
    public var webPushPausedReason: String?
    public var rateLimit: Int32?
    public var pausedReason: String?
    public var pausedAt: Date?
    /// The newest `pause_app` row of `push.operator_audit` at or after the pause, or nil (a worker's pause).
    public var pausedBy: String?
    /// The safety valve's window: the newest minutes holding at least `minimumAnswers` answers, within a week.
    public var windowAnswered: Int64
    public var windowBadDeviceTokens: Int64
    public var suppressedPruneCandidates: Int64
    public var waitingPruneCandidates: Int64
    public var failures: [DashboardReasonCount]
    /// Broadcast controls (migration 0028): the zone of devices without one, the quiet hours (`22:00-08:00`,
    /// local time) and the frequency caps as JSON text.
    public var defaultTimezone: String = "UTC"
    public var quietHours: String?
    public var frequencyCaps: String?
}

/// A reason's count on one platform (the job and app pages).
public struct DashboardReasonCount: Sendable, Codable {
    public var platform: String
    public var status: Int16
    public var reason: String?
    public var count: Int64
}

extension DashboardReader {
    /// The app's page, or nil for an unknown app or one the login is not granted.
    /// - Parameter minimumAnswers: the valve's `--bad-device-token-min-answers` (the worker's default, 1000).
    public func app(_ appID: String, minimumAnswers: Int64 = 1000, now: Date = Date()) async throws -> DashboardAppDetail? {
        guard let row = try await run("""
            SELECT id, topic, environment,
                   CASE WHEN private_key_path IS NOT NULL THEN 'token'
                        WHEN certificate_path IS NOT NULL THEN 'certificate' ELSE 'none' END,
                   fcm_project_id, rate_limit, paused_reason, paused_at, valve_reset_at,
                   vapid_private_key_path IS NOT NULL, vapid_public_key, vapid_subject,
                   web_push_paused_reason, default_timezone, quiet_hours, frequency_caps::text
              FROM push.apps
             WHERE id = \(appID) AND (\(granted)::text[] IS NULL OR id = ANY (\(granted)::text[]))
            """).first else { return nil }
        let (id, topic, environment, auth, fcm, rate, reason, pausedAt, resetAt, webPush, vapidKey, vapidSubject, webPaused) =
            try row.decode((String, String?, String, String, String?, Int32?, String?, Date?, Date?, Bool, String?, String?, String?).self)
        // Past the first 13 by position: PostgresNIO decodes tuples of at most 15 columns.
        let cells = PostgresRandomAccessRow(row)
        let defaultTimezone = try cells[13].decode(String.self, context: .default)
        let quietHours = try cells[14].decode(String?.self, context: .default)
        let frequencyCaps = try cells[15].decode(String?.self, context: .default)

        var pausedBy: String?
        if let pausedAt {
            pausedBy = try await run("""
                SELECT actor || coalesce(' (' || detail || ')', '') FROM push.operator_audit
                 WHERE app_id = \(id) AND action = 'pause_app' AND at >= \(pausedAt)::timestamptz - interval '1 second'
                 ORDER BY id DESC LIMIT 1
                """).first?.decode(String.self)
        }

        // The valve's window, read as the worker reads it: the newest minutes until they hold enough answers.
        let weekAgo = now.addingTimeInterval(-7 * 86_400)
        let window = try await single("""
            WITH minutes AS (
                SELECT answered, bad_device_tokens,
                       sum(answered) OVER (ORDER BY minute DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
                  FROM push.app_answer_window
                 WHERE app_id = \(id) AND minute >= greatest(\(weekAgo)::timestamptz, coalesce(\(resetAt)::timestamptz, '-infinity'))
            )
            SELECT coalesce(sum(answered), 0)::int8, coalesce(sum(bad_device_tokens), 0)::int8
              FROM minutes WHERE coalesce(before, 0) < \(minimumAnswers)
            """).decode((Int64, Int64).self)

        let candidates = try await single("""
            SELECT count(*) FILTER (WHERE suppressed), count(*) FILTER (WHERE NOT suppressed AND NOT confirmed)
              FROM push.prune_candidates WHERE app_id = \(id)
            """).decode((Int64, Int64).self)

        let since = now.addingTimeInterval(-86_400)
        // Not delivered: APNs and FCM answer 200, a push service 201 (any 2xx). A token a frequency cap held back
        // is an outcome of its own, not a failure.
        let failures = try await run("""
            SELECT platform, status, reason, count(*) FROM push.deliveries
             WHERE app_id = \(id) AND sent_at >= \(since)::timestamptz AND status NOT BETWEEN 200 AND 299
               AND NOT (status = 0 AND reason IS NOT DISTINCT FROM 'FrequencyCapped')
             GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2, 3 LIMIT 20
            """).map(DashboardReasonCount.init(row:))

        return DashboardAppDetail(
            id: id, topic: topic, environment: environment, apnsAuth: auth, fcmProjectID: fcm,
            webPushConfigured: webPush, vapidPublicKey: vapidKey, vapidSubject: vapidSubject, webPushPausedReason: webPaused, rateLimit: rate,
            pausedReason: reason, pausedAt: pausedAt, pausedBy: pausedBy, windowAnswered: window.0,
            windowBadDeviceTokens: window.1, suppressedPruneCandidates: candidates.0,
            waitingPruneCandidates: candidates.1, failures: failures, defaultTimezone: defaultTimezone,
            quietHours: quietHours, frequencyCaps: frequencyCaps)
    }
}

extension DashboardReasonCount {
    init(row: PostgresRow) throws {
        let (platform, status, reason, count) = try row.decode((String, Int16, String?, Int64).self)
        self.init(platform: platform, status: status, reason: reason, count: count)
    }
}
