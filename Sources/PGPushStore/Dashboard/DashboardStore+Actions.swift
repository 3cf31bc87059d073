import Foundation
import PostgresNIO

/// What an action did.
public enum DashboardActionResult: Sendable, Equatable {
    /// It changed something.
    case done
    /// Nothing to do: the job had already ended, the app was not paused.
    case unchanged
    /// No such job or app, or one of an app the login is not granted.
    case notFound
}

/// What a resend did.
public enum DashboardResendResult: Sendable, Equatable {
    /// The new job.
    case created(Int64)
    /// No token of the job qualifies (every one delivered, pruned, gone, already resent, or failed for good).
    case nothingToResend
    /// No such job, or one of an app the login is not granted.
    case notFound
    /// The database refused it (a channel broadcast, an expired job): its message.
    case refused(String)
}

extension DashboardStore {
    /// `push.cancel`, audited in the same transaction. `push.cancel` applies the login's app grants itself.
    public func cancelJob(_ jobID: Int64, user: String) async throws -> DashboardActionResult {
        try await write { connection in
            let cancelled: Bool
            do {
                cancelled = try await connection.query("SELECT push.cancel(\(jobID))", logger: logger).collect()
                    .first?.decode(Bool.self) ?? false
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "P0002" {
                return .notFound
            }
            guard cancelled else { return .unchanged }
            let appID = try await connection.query("SELECT app_id FROM push.jobs WHERE id = \(jobID)", logger: logger)
                .collect().first?.decode(String.self)
            try await audit(connection, user: user, action: "cancel_job", appID: appID, detail: "job \(jobID)")
            return .done
        }
    }

    /// `push.resend_failed`: a new job to the tokens of a finished job whose outcome was a failure worth
    /// retrying, audited in the same transaction (`resend_failed`, detail naming both jobs and the token count).
    /// `push.resend_failed` applies the login's app grants itself; nothing is audited when no token qualifies.
    public func resendFailed(_ jobID: Int64, user: String) async throws -> DashboardResendResult {
        try await write { connection in
            let resent: Int64?
            do {
                resent = try await connection.query("SELECT push.resend_failed(\(jobID))", logger: logger).collect()
                    .first?.decode(Int64?.self) ?? nil
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "P0002" {
                return .notFound
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23514" {
                // A channel broadcast, or an expired job: the function says which.
                return .refused(error.serverInfo?[.message] ?? "this job cannot be resent")
            }
            guard let resent else { return .nothingToResend }
            let (appID, tokens) = try await connection.query("""
                SELECT app_id, coalesce(cardinality(tokens), 0)::int8 FROM push.jobs WHERE id = \(resent)
                """, logger: logger).collect().first?.decode((String, Int64).self) ?? ("", Int64(0))
            try await audit(
                connection, user: user, action: "resend_failed", appID: appID.isEmpty ? nil : appID,
                detail: "job \(jobID) resent as job \(resent) (\(tokens) token\(tokens == 1 ? "" : "s"))")
            return .created(resent)
        }
    }

    /// An operator's pause (``OperatorStore/pauseApp(_:reason:)``, the statement `pgpush apps pause` runs),
    /// audited with the reason.
    public func pauseApp(_ appID: String, reason: String, user: String) async throws -> DashboardActionResult {
        try await write { connection in
            guard try await isGranted(appID, connection) else { return .notFound }
            let store = OperatorStore(connection: connection, logger: logger)
            guard try await store.pauseApp(appID, reason: reason) else { return .notFound }
            try await audit(connection, user: user, action: "pause_app", appID: appID, detail: "reason: \(reason)")
            return .done
        }
    }

    /// ``OperatorStore/resumeApp(_:)`` (`pgpush apps resume`), audited when the app was paused. Like `pgpush apps
    /// resume`, it also lifts a pause of the app's Web Push alone (`web_push_paused_reason`, set by the workers
    /// when a push service refused its VAPID credential); the audit row's detail then names it and its reason.
    public func resumeApp(_ appID: String, user: String) async throws -> DashboardActionResult {
        try await write { connection in
            guard try await isGranted(appID, connection) else { return .notFound }
            let webPause = try await resumeWebPush(appID, connection)
            let store = OperatorStore(connection: connection, logger: logger)
            switch try await store.resumeApp(appID) {
            case nil: return .notFound
            case false? where webPause == nil: return .unchanged
            case let appWasPaused?:
                let detail = webPause.map { reason in
                    (appWasPaused ? "the app and its Web Push" : "Web Push only") + " (Web Push was paused: \(reason))"
                }
                try await audit(connection, user: user, action: "resume_app", appID: appID, detail: detail)
                return .done
            }
        }
    }

    /// Clears the app's Web Push pause; returns its reason, or nil when its Web Push was not paused. Read first
    /// and updated only when set, so that a resume of an app whose Web Push is not paused needs no privilege on
    /// the column.
    private func resumeWebPush(_ appID: String, _ connection: PostgresConnection) async throws -> String? {
        let paused = try await connection.query("""
            SELECT web_push_paused_reason FROM push.apps WHERE id = \(appID) AND web_push_paused_reason IS NOT NULL
            """, logger: logger).collect()
        guard !paused.isEmpty else { return nil }
        // The old reason from a self-join: RETURNING sees only the new values.
        return try await connection.query("""
            UPDATE push.apps a SET web_push_paused_reason = NULL, updated_at = now()
              FROM push.apps old
             WHERE a.id = \(appID) AND old.id = a.id AND a.web_push_paused_reason IS NOT NULL
            RETURNING old.web_push_paused_reason
            """, logger: logger).collect().first?.decode(String?.self)
    }

    /// The table's `actor` is the database login by default; the dashboard's rows name its user as well, since
    /// every dashboard user shares that login.
    private func audit(_ connection: PostgresConnection, user: String, action: String, appID: String?, detail: String?) async throws {
        _ = try await connection.query("""
            INSERT INTO push.operator_audit (actor, action, app_id, detail)
            VALUES ('dashboard:' || \(user)::text || ' (' || session_user || ')', \(action), \(appID), \(detail))
            """, logger: logger).collect()
    }

    /// Whether the login may see the app: the operator statements on push.apps do not apply grants themselves.
    private func isGranted(_ appID: String, _ connection: PostgresConnection) async throws -> Bool {
        try await connection.query("""
            SELECT g IS NULL OR \(appID)::text = ANY (g) FROM push.granted_apps() AS g
            """, logger: logger).collect().first?.decode(Bool.self) ?? false
    }
}
