import Foundation
import PostgresNIO

/// One row of `push.apps` as `pgpush apps list` shows it: credential locations only, never a secret.
public struct AppListing: Sendable {
    public var id, environment: String
    public var topic, teamID, keyID, keyPath, certificatePath, passwordEnv, fcmProjectID, fcmServiceAccount: String?
    public var rateLimit: Int32?
    public var pausedReason: String?
    public var pausedAt: Date?
    public var createdAt: Date
}

/// A new row of `push.apps` (`pgpush apps add`).
public struct AppRegistration: Sendable {
    public var id, environment: String
    public var topic, teamID, keyID, keyPath, certificatePath, passwordEnv, fcmProjectID, fcmServiceAccount: String?
    public var rateLimit: Int32?

    public init(
        id: String, environment: String, topic: String?, teamID: String?, keyID: String?, keyPath: String?,
        certificatePath: String?, passwordEnv: String?, fcmProjectID: String?, fcmServiceAccount: String?, rateLimit: Int32?
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
    }
}

extension OperatorStore {
    /// Every app, by id.
    public func listApps() async throws -> [AppListing] {
        let rows = try await run("""
            SELECT id, topic, environment, team_id, key_id, private_key_path, certificate_path,
                   certificate_password_env, rate_limit, paused_reason, paused_at, created_at,
                   fcm_project_id, fcm_service_account_path
              FROM push.apps ORDER BY id
            """)
        return try rows.map { row in
            let (id, topic, environment, team, key, keyPath, certificate, passwordEnv, rate, reason, pausedAt, created,
                 fcmProject, fcmAccount) = try row.decode(
                (String, String?, String, String?, String?, String?, String?, String?, Int32?, String?, Date?, Date,
                 String?, String?).self)
            return AppListing(
                id: id, environment: environment, topic: topic, teamID: team, keyID: key, keyPath: keyPath,
                certificatePath: certificate, passwordEnv: passwordEnv, fcmProjectID: fcmProject,
                fcmServiceAccount: fcmAccount, rateLimit: rate, pausedReason: reason, pausedAt: pausedAt, createdAt: created)
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
                                       fcm_service_account_path)
                VALUES (\(app.id), \(app.topic), \(app.environment), \(app.teamID), \(app.keyID), \(app.keyPath),
                        \(app.certificatePath), \(app.passwordEnv), \(app.rateLimit), \(app.fcmProjectID), \(app.fcmServiceAccount))
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

    /// Clears the pause. Returns whether the app was paused, or `nil` for an unknown app.
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

    /// `push.confirm_stale_audience`: how many BadDeviceToken reports were confirmed for pruning.
    public func confirmStaleAudience(_ appID: String, note: String?) async throws -> Int64 {
        try await run("SELECT push.confirm_stale_audience(\(appID), \(note))").first?.decode(Int64.self) ?? 0
    }
}
