import Foundation
import PostgresNIO

/// One row of `push.apps` as `pgpush apps list` shows it: credential locations only, never a secret.
public struct AppListing: Sendable {
    public var id, environment: String
    public var topic, teamID, keyID, keyPath, certificatePath, passwordEnv, fcmProjectID, fcmServiceAccount: String?
    /// Web Push: the workers' path of the VAPID private key, its public key (the website's
    /// `applicationServerKey`) and the VAPID subject; all `nil` for an app without Web Push.
    public var vapidKeyPath, vapidPublicKey, vapidSubject: String?
    public var rateLimit: Int32?
    public var pausedReason: String?
    public var pausedAt: Date?
    /// Why the workers stopped the app's Web Push (a push service refused its VAPID key); `nil` while it sends.
    public var webPushPausedReason: String?
    public var createdAt: Date
    /// The app's broadcast controls (migration 0028).
    public var controls = AppBroadcastControls(defaultTimezone: "UTC", quietHours: nil, frequencyCaps: nil)
}

/// An app's broadcast controls: the zone of its devices that have none, its quiet hours (`22:00-08:00`, local time),
/// and its frequency caps as JSON text (`{"marketing": {"max": 3, "per": "24 hours"}}`).
public struct AppBroadcastControls: Sendable, Hashable {
    public var defaultTimezone: String
    public var quietHours: String?
    public var frequencyCaps: String?

    public init(defaultTimezone: String, quietHours: String?, frequencyCaps: String?) {
        self.defaultTimezone = defaultTimezone
        self.quietHours = quietHours
        self.frequencyCaps = frequencyCaps
    }
}

/// What ``OperatorStore/setBroadcastControls(_:_:)`` changes: each control is kept, set or cleared.
public struct AppBroadcastControlsChange: Sendable, Hashable {
    public enum Change: Sendable, Hashable {
        case keep
        case set(String)
        /// Back to NULL (no quiet hours, no caps).
        case clear

        var isKept: Bool { self == .keep }
        var value: String? { if case .set(let value) = self { value } else { nil } }
    }

    /// `nil` keeps it; the column has no NULL (`UTC` is its default).
    public var defaultTimezone: String?
    public var quietHours: Change
    /// JSON text.
    public var frequencyCaps: Change

    public init(defaultTimezone: String? = nil, quietHours: Change = .keep, frequencyCaps: Change = .keep) {
        self.defaultTimezone = defaultTimezone
        self.quietHours = quietHours
        self.frequencyCaps = frequencyCaps
    }
}

/// An app's Web Push settings (`push.apps.vapid_*`): where the workers read the VAPID private key, the public key
/// derived from it, and the subject. Never the key itself.
public struct VAPIDSettings: Sendable, Hashable {
    public var keyPath: String
    /// Base64url of the uncompressed P-256 point, without padding.
    public var publicKey: String
    public var subject: String

    public init(keyPath: String, publicKey: String, subject: String) {
        self.keyPath = keyPath
        self.publicKey = publicKey
        self.subject = subject
    }
}

/// What ``OperatorStore/setVAPID(_:_:)`` replaced, and what it left alone.
public struct VAPIDChange: Sendable, Hashable {
    /// The app's public key before; when it differs, every browser must subscribe again.
    public var previousPublicKey: String?
    /// The app's Web Push pause, which setting a key does not lift.
    public var webPushPausedReason: String?
}

/// What resuming an app cleared.
public struct AppResumption: Sendable, Hashable {
    /// The whole app was paused (`paused_reason`).
    public var wasPaused: Bool
    /// Its Web Push was paused (`web_push_paused_reason`).
    public var webPushWasPaused: Bool
}

/// A new row of `push.apps` (`pgpush apps add`).
public struct AppRegistration: Sendable {
    public var id, environment: String
    public var topic, teamID, keyID, keyPath, certificatePath, passwordEnv, fcmProjectID, fcmServiceAccount: String?
    public var rateLimit: Int32?
    public var vapid: VAPIDSettings?

    public init(
        id: String, environment: String, topic: String?, teamID: String?, keyID: String?, keyPath: String?,
        certificatePath: String?, passwordEnv: String?, fcmProjectID: String?, fcmServiceAccount: String?, rateLimit: Int32?,
        vapid: VAPIDSettings? = nil
    ) {
        self.id = id
        self.environment = environment
        self.topic = topic
        self.teamID = teamID
        self.keyID = keyID
        self.keyPath = keyPath
        self.certificatePath = certificatePath
        self.passwordEnv = passwordEnv
        self.fcmProjectID = fcmProjectID
        self.fcmServiceAccount = fcmServiceAccount
        self.rateLimit = rateLimit
        self.vapid = vapid
    }
}

extension OperatorStore {
    /// Every app, by id.
    public func listApps() async throws -> [AppListing] {
        let rows = try await run("""
            SELECT id, topic, environment, team_id, key_id, private_key_path, certificate_path,
                   certificate_password_env, rate_limit, paused_reason, paused_at, created_at,
                   fcm_project_id, fcm_service_account_path, vapid_private_key_path, vapid_public_key, vapid_subject,
                   web_push_paused_reason, default_timezone, quiet_hours, frequency_caps::text
              FROM push.apps ORDER BY id
            """)
        return try rows.map { row in
            let (id, topic, environment, team, key, keyPath, certificate, passwordEnv, rate, reason, pausedAt, created,
                 fcmProject, fcmAccount, vapidPath, vapidPublic, vapidSubject, webPushReason) = try row.decode(
                (String, String?, String, String?, String?, String?, String?, String?, Int32?, String?, Date?, Date,
                 String?, String?, String?, String?, String?, String?).self)
            // Past the first 18 by position (migration 0028's columns).
            let cells = PostgresRandomAccessRow(row)
            let controls = AppBroadcastControls(
                defaultTimezone: try cells[18].decode(String.self, context: .default),
                quietHours: try cells[19].decode(String?.self, context: .default),
                frequencyCaps: try cells[20].decode(String?.self, context: .default))
            return AppListing(
                id: id, environment: environment, topic: topic, teamID: team, keyID: key, keyPath: keyPath,
                certificatePath: certificate, passwordEnv: passwordEnv, fcmProjectID: fcmProject,
                fcmServiceAccount: fcmAccount, vapidKeyPath: vapidPath, vapidPublicKey: vapidPublic, vapidSubject: vapidSubject,
                rateLimit: rate, pausedReason: reason, pausedAt: pausedAt, webPushPausedReason: webPushReason,
                createdAt: created, controls: controls)
        }
    }

    /// Whether an app with this id exists.
    public func appExists(_ appID: String) async throws -> Bool {
        try await !run("SELECT 1 FROM push.apps WHERE id = \(appID)").isEmpty
    }

    /// Adds the app; `false` when an app with its id exists already.
    public func addApp(_ app: AppRegistration) async throws -> Bool {
        do {
            try await run("""
                INSERT INTO push.apps (id, topic, environment, team_id, key_id, private_key_path,
                                       certificate_path, certificate_password_env, rate_limit, fcm_project_id,
                                       fcm_service_account_path, vapid_private_key_path, vapid_public_key, vapid_subject)
                VALUES (\(app.id), \(app.topic), \(app.environment), \(app.teamID), \(app.keyID), \(app.keyPath),
                        \(app.certificatePath), \(app.passwordEnv), \(app.rateLimit), \(app.fcmProjectID), \(app.fcmServiceAccount),
                        \(app.vapid?.keyPath), \(app.vapid?.publicKey), \(app.vapid?.subject))
                """)
            return true
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            return false
        }
    }

    /// An operator's pause: sets the reason (replacing an earlier one) and the time. `false` for an unknown app.
    public func pauseApp(_ appID: String, reason: String) async throws -> Bool {
        try await !run(AppStatements.pause(appID, reason: reason, replacingReason: true)).isEmpty
    }

    /// Clears the app's pause (not its Web Push's: this statement needs UPDATE only on the columns the
    /// dashboard's role may write, see `DashboardStore.resumeApp`). Returns whether the app was paused, or `nil`
    /// for an unknown app.
    public func resumeApp(_ appID: String) async throws -> Bool? {
        // The old row's state comes from a self-join: RETURNING sees only the new values.
        let rows = try await run("""
            UPDATE push.apps a SET paused_reason = NULL, paused_at = NULL, updated_at = now()
              FROM push.apps old
             WHERE a.id = \(appID) AND old.id = a.id
            RETURNING old.paused_reason IS NOT NULL
            """)
        return try rows.first?.decode(Bool.self)
    }

    /// `pgpush apps resume`: clears the app's pause and its Web Push's (set by the workers when a push service
    /// refused the VAPID key), and says which of them were set; `nil` for an unknown app.
    public func resumeAppReporting(_ appID: String) async throws -> AppResumption? {
        // The old row's state comes from a self-join: RETURNING sees only the new values.
        let rows = try await run("""
            UPDATE push.apps a SET paused_reason = NULL, paused_at = NULL, web_push_paused_reason = NULL, updated_at = now()
              FROM push.apps old
             WHERE a.id = \(appID) AND old.id = a.id
            RETURNING old.paused_reason IS NOT NULL, old.web_push_paused_reason IS NOT NULL
            """)
        return try rows.first.map { row in
            let (paused, webPushPaused) = try row.decode((Bool, Bool).self)
            return AppResumption(wasPaused: paused, webPushWasPaused: webPushPaused)
        }
    }

    /// Sets an existing app's Web Push settings, replacing earlier ones; the database checks the subject. `nil` for
    /// an unknown app. A Web Push pause stays until ``resumeAppReporting(_:)``: the operator decides when sending
    /// starts again.
    public func setVAPID(_ appID: String, _ vapid: VAPIDSettings) async throws -> VAPIDChange? {
        // The old public key comes from a self-join: RETURNING sees only the new values.
        let rows = try await run("""
            UPDATE push.apps a SET vapid_private_key_path = \(vapid.keyPath), vapid_public_key = \(vapid.publicKey),
                   vapid_subject = \(vapid.subject), updated_at = now()
              FROM push.apps old
             WHERE a.id = \(appID) AND old.id = a.id
            RETURNING old.vapid_public_key, a.web_push_paused_reason
            """)
        return try rows.first.map { row in
            let (previous, paused) = try row.decode((String?, String?).self)
            return VAPIDChange(previousPublicKey: previous, webPushPausedReason: paused)
        }
    }

    /// Sets the controls the change names and keeps the others; push.apps' trigger checks the result and names the
    /// field it refuses (check_violation). Returns the app's controls after, or `nil` for an unknown app.
    public func setBroadcastControls(_ appID: String, _ change: AppBroadcastControlsChange) async throws -> AppBroadcastControls? {
        let c = change
        let rows = try await run("""
            UPDATE push.apps
               SET default_timezone = coalesce(\(c.defaultTimezone)::text, default_timezone),
                   quiet_hours = CASE WHEN \(c.quietHours.isKept) THEN quiet_hours ELSE \(c.quietHours.value)::text END,
                   frequency_caps = CASE WHEN \(c.frequencyCaps.isKept) THEN frequency_caps ELSE \(c.frequencyCaps.value)::jsonb END,
                   updated_at = now()
             WHERE id = \(appID)
            RETURNING default_timezone, quiet_hours, frequency_caps::text
            """)
        return try rows.first.map { row in
            let (timezone, quietHours, caps) = try row.decode((String, String?, String?).self)
            return AppBroadcastControls(defaultTimezone: timezone, quietHours: quietHours, frequencyCaps: caps)
        }
    }

    /// `push.confirm_stale_audience`: how many BadDeviceToken reports were confirmed for pruning.
    public func confirmStaleAudience(_ appID: String, note: String?) async throws -> Int64 {
        try await run("SELECT push.confirm_stale_audience(\(appID), \(note))").first?.decode(Int64.self) ?? 0
    }
}
