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
                   rate_limit, paused_reason, fcm_project_id, fcm_service_account_path
              FROM push.apps
            """)
        var apps: [String: AppRecord] = [:]
        for row in rows {
            let (id, topic, environment, teamID, keyID, keyPath, certificatePath, passwordEnv, rateLimit, paused, fcmProject, fcmAccount) =
                try row.decode((String, String, String, String?, String?, String?, String?, String?, Int?, String?, String?, String?).self)
            apps[id] = AppRecord(
                id: id, topic: topic, environment: environment, teamID: teamID, keyID: keyID,
                privateKeyPath: keyPath, certificatePath: certificatePath, certificatePasswordEnv: passwordEnv,
                rateLimit: rateLimit, pausedReason: paused, fcmProjectID: fcmProject, fcmServiceAccountPath: fcmAccount)
        }
        return apps
    }

    /// Pauses an app with a readable reason; its jobs wait until `paused_reason` is cleared. An app paused
    /// already (by an operator, say) keeps its reason. Returns `true` if this call paused it (it was active).
    @discardableResult
    public func pauseApp(_ appID: String, reason: String) async throws -> Bool {
        try await !run(AppStatements.pause(appID, reason: reason, replacingReason: false)).isEmpty
    }

    /// Sends a notification on `channel` (a listener's self-test; producers' notifications come from triggers).
    public func notify(_ channel: String, payload: String) async throws {
        try await run("SELECT pg_notify(\(channel), \(payload))")
    }
}
