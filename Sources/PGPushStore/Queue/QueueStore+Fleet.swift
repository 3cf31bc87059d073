import Foundation
import PostgresNIO

extension QueueStore {
    /// Adds this worker to the live-worker registry.
    public func registerWorker(hostname: String, pid: Int) async throws {
        try await run("""
            INSERT INTO push.workers (id, hostname, pid) VALUES (\(workerID), \(hostname), \(pid))
            ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), hostname = EXCLUDED.hostname, pid = EXCLUDED.pid
            """)
    }

    /// Leaves the registry, so the others take over its share of the rate limits at once.
    public func unregisterWorker(deadline: Duration = QueueStore.deadline) async throws {
        try await run("DELETE FROM push.workers WHERE id = \(workerID)", deadline: deadline)
    }

    /// Every app row (credential locations only; secrets never live in the database).
    public func apps() async throws -> [String: AppRecord] {
        let rows = try await run("""
            SELECT id, coalesce(topic, ''), environment, team_id, key_id, private_key_path, certificate_path, certificate_password_env,
                   rate_limit, paused_reason, fcm_project_id, fcm_service_account_path, vapid_private_key_path,
                   vapid_public_key, vapid_subject, web_push_paused_reason
              FROM push.apps
            """)
        var apps: [String: AppRecord] = [:]
        for row in rows {
            let row = row.makeRandomAccess()
            let (id, topic, environment, teamID, keyID, keyPath, certificatePath, passwordEnv, rateLimit, paused, fcmProject, fcmAccount) =
                (try row[0].decode(String.self), try row[1].decode(String.self), try row[2].decode(String.self),
                 try row[3].decode(String?.self), try row[4].decode(String?.self), try row[5].decode(String?.self),
                 try row[6].decode(String?.self), try row[7].decode(String?.self), try row[8].decode(Int?.self),
                 try row[9].decode(String?.self), try row[10].decode(String?.self), try row[11].decode(String?.self))
            var app = AppRecord(
                id: id, topic: topic, environment: environment, teamID: teamID, keyID: keyID,
                privateKeyPath: keyPath, certificatePath: certificatePath, certificatePasswordEnv: passwordEnv,
                rateLimit: rateLimit, pausedReason: paused, fcmProjectID: fcmProject, fcmServiceAccountPath: fcmAccount)
            app.vapidPrivateKeyPath = try row[12].decode(String?.self)
            app.vapidPublicKey = try row[13].decode(String?.self)
            app.vapidSubject = try row[14].decode(String?.self)
            app.webPushPausedReason = try row[15].decode(String?.self)
            apps[id] = app
        }
        return apps
    }

    /// Pauses an app with a readable reason; its jobs wait until `paused_reason` is cleared. An app paused
    /// already (by an operator, say) keeps its reason. Returns `true` if this call paused it (it was active).
    @discardableResult
    public func pauseApp(_ appID: String, reason: String) async throws -> Bool {
        try await !run(AppStatements.pause(appID, reason: reason, replacingReason: false)).isEmpty
    }

    /// Pauses an app's Web Push only, with a readable reason: a push service refused its VAPID key. Its web
    /// tokens wait until `web_push_paused_reason` is cleared (`pgpush apps resume`); its APNs and FCM send on. A
    /// pause already there keeps its reason. Returns `true` if this call paused it.
    @discardableResult
    public func pauseWebPush(_ appID: String, reason: String) async throws -> Bool {
        try await !run("""
            UPDATE push.apps SET web_push_paused_reason = \(reason), updated_at = now()
             WHERE id = \(appID) AND web_push_paused_reason IS NULL
            RETURNING id
            """).isEmpty
    }

    /// The keys of the web subscriptions among `tokens` (their endpoints), by endpoint: what each message is
    /// encrypted for. An endpoint that is not a registered subscription of the app is missing.
    public func webPushKeys(appID: String, tokens: [String]) async throws -> [String: WebPushKeys] {
        let rows = try await run("""
            SELECT d.token, d.web_p256dh, d.web_auth FROM push.devices d
             WHERE d.app_id = \(appID) AND d.token = ANY (\(tokens)::text[]) AND d.platform = 'web'
            """)
        var keys: [String: WebPushKeys] = [:]
        for row in rows {
            let (token, p256dh, auth) = try row.decode((String, String, String).self)
            keys[token] = WebPushKeys(p256dh: p256dh, auth: auth)
        }
        return keys
    }

    /// Sends a notification on `channel` (a listener's self-test; producers' notifications come from triggers).
    public func notify(_ channel: String, payload: String) async throws {
        try await run("SELECT pg_notify(\(channel), \(payload))")
    }
}
