import Foundation
import PostgresNIO

extension OperatorStore {
    /// Whether the role and the app exist, in one round trip.
    public func roleAndAppExist(role: String, appID: String) async throws -> (role: Bool, app: Bool) {
        let rows = try await run("""
            SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = \(role)), EXISTS (SELECT 1 FROM push.apps WHERE id = \(appID))
            """)
        let (role, app) = try rows.first?.decode((Bool, Bool).self) ?? (false, false)
        return (role, app)
    }

    /// `push.grant_app`: whether the grant was added (it is audited).
    public func grantApp(role: String, appID: String) async throws -> Bool {
        try await run("SELECT push.grant_app(\(role), \(appID))").first?.decode(Bool.self) ?? false
    }

    /// `push.revoke_app`: whether a grant was removed (it is audited).
    public func revokeApp(role: String, appID: String) async throws -> Bool {
        try await run("SELECT push.revoke_app(\(role), \(appID))").first?.decode(Bool.self) ?? false
    }

    /// How many apps are granted to the role.
    public func grantCount(role: String) async throws -> Int64 {
        try await run("SELECT count(*) FROM push.app_grants WHERE role_name = \(role)").first?.decode(Int64.self) ?? 0
    }
}
