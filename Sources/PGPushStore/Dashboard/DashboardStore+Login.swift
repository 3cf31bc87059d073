import Foundation
import PGPushCore
import PostgresNIO

/// The dashboard's database login, against the groups the migrations make for it (``DashboardStore/login()``).
public struct DashboardLogin: Sendable, Equatable {
    /// The login's relation to one group role.
    public struct Membership: Sendable, Equatable {
        /// The group exists in the cluster (the migrations make it).
        public let exists: Bool
        /// The login is a member, directly or through other roles (`pg_has_role(…, 'MEMBER')`).
        public let isMember: Bool
        /// The login has the group's privileges without `SET ROLE` (`pg_has_role(…, 'USAGE')`): what the
        /// dashboard's statements need. A member without it has the group through a `NOINHERIT` grant.
        public let hasPrivileges: Bool

        public init(exists: Bool, isMember: Bool, hasPrivileges: Bool) {
            self.exists = exists
            self.isMember = isMember
            self.hasPrivileges = hasPrivileges
        }
    }

    /// `current_user`: whose privileges the statements run with (the URL's user, or a role it set).
    public let name: String
    /// ``name`` as an SQL identifier (`quote_ident`), for a `GRANT` to copy.
    public let quotedName: String
    /// A superuser reads and writes everything, a member of no group or not.
    public let isSuperuser: Bool
    /// `pgpush_dashboard`: what every page reads.
    public let dashboard: Membership
    /// `pgpush_dashboard_actions`: what `--allow-actions` does, and `pgpush_dashboard`.
    public let actions: Membership
    /// `pgpush_reader`: the views only (the reporting role, often mistaken for the dashboard's).
    public let reader: Membership

    public init(
        name: String, quotedName: String, isSuperuser: Bool, dashboard: Membership, actions: Membership, reader: Membership
    ) {
        self.name = name
        self.quotedName = quotedName
        self.isSuperuser = isSuperuser
        self.dashboard = dashboard
        self.actions = actions
        self.reader = reader
    }

    /// The login may read every page: it has `pgpush_dashboard`'s privileges (`pgpush_dashboard_actions`
    /// includes them), or is a superuser.
    public var mayRead: Bool { isSuperuser || dashboard.hasPrivileges || actions.hasPrivileges }

    /// The login may also run `--allow-actions`' statements.
    public var mayAct: Bool { isSuperuser || actions.hasPrivileges }
}

extension DashboardStore {
    /// The login's memberships in the dashboard's groups: one statement on the catalog, readable by any login
    /// (a role the migrations have not made yet reads as absent rather than failing). The dashboard checks it
    /// at start, and on each page while something is missing, so a `GRANT` takes effect on the next page.
    public func login() async throws -> DashboardLogin {
        let milliseconds = String(statementTimeout.components.seconds * 1000
            + statementTimeout.components.attoseconds / 1_000_000_000_000_000)
        let logger = self.logger
        return try await transaction { connection in
            _ = try await connection.query("""
                SELECT set_config('statement_timeout', \(milliseconds), true), set_config('transaction_read_only', 'on', true)
                """, logger: logger).collect()
            let rows = try await connection.query("""
                SELECT current_user::text, quote_ident(current_user)::text, coalesce(u.rolsuper, false),
                       d.oid IS NOT NULL, coalesce(pg_has_role(current_user, d.oid, 'MEMBER'), false),
                       coalesce(pg_has_role(current_user, d.oid, 'USAGE'), false),
                       a.oid IS NOT NULL, coalesce(pg_has_role(current_user, a.oid, 'MEMBER'), false),
                       coalesce(pg_has_role(current_user, a.oid, 'USAGE'), false),
                       r.oid IS NOT NULL, coalesce(pg_has_role(current_user, r.oid, 'MEMBER'), false),
                       coalesce(pg_has_role(current_user, r.oid, 'USAGE'), false)
                  FROM (SELECT 1) AS one
                  LEFT JOIN pg_roles u ON u.rolname = current_user
                  LEFT JOIN pg_roles d ON d.rolname = 'pgpush_dashboard'
                  LEFT JOIN pg_roles a ON a.rolname = 'pgpush_dashboard_actions'
                  LEFT JOIN pg_roles r ON r.rolname = 'pgpush_reader'
                """, logger: logger).collect()
            guard let row = rows.first else { throw PGPushError(.internal, "the login's roles read no row") }
            let (name, quoted, superuser, dExists, dMember, dUsage, aExists, aMember, aUsage, rExists, rMember, rUsage) = try row.decode(
                (String, String, Bool, Bool, Bool, Bool, Bool, Bool, Bool, Bool, Bool, Bool).self)
            return DashboardLogin(
                name: name, quotedName: quoted, isSuperuser: superuser,
                dashboard: .init(exists: dExists, isMember: dMember, hasPrivileges: dUsage),
                actions: .init(exists: aExists, isMember: aMember, hasPrivileges: aUsage),
                reader: .init(exists: rExists, isMember: rMember, hasPrivileges: rUsage))
        }
    }
}
