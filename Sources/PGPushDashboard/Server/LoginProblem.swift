import PGPushStore

/// What the dashboard's database login lacks, in the words the log, the pages and the actions use: the group
/// it needs, why, and the statement that fixes it.
struct LoginProblem: Sendable, Equatable {
    /// The group the login needs: `pgpush_dashboard`, or `pgpush_dashboard_actions` with `--allow-actions`.
    let role: String
    /// The login's name, as `current_user` has it.
    let login: String
    /// One sentence: "login alice is not a member of pgpush_dashboard: …".
    let summary: String
    /// What an administrator runs: "GRANT pgpush_dashboard TO alice".
    let fix: String
    /// The pages cannot read without it. When false, only the actions lack their group: the pages read, and
    /// say that the actions will be refused.
    let blocksPages: Bool

    /// The one line of the log and of a plain-text answer.
    var line: String { "\(summary); \(fix)" }

    /// ``fix`` as a statement to copy into psql (with its semicolon), when it is one.
    var statement: String { fix.hasPrefix("GRANT ") || fix.hasPrefix("ALTER ") ? fix + ";" : fix }
}

extension DashboardLogin {
    static let readRole = "pgpush_dashboard"
    static let actionsRole = "pgpush_dashboard_actions"

    /// What the login lacks for a dashboard with or without `--allow-actions`, or nil when it has it all.
    func problem(allowActions: Bool) -> LoginProblem? {
        if mayRead, !allowActions || mayAct { return nil }
        let role = allowActions ? Self.actionsRole : Self.readRole
        let membership = allowActions ? actions : dashboard
        let blocks = !mayRead
        func problem(_ summary: String, _ fix: String) -> LoginProblem {
            LoginProblem(role: role, login: name, summary: summary, fix: fix, blocksPages: blocks)
        }
        if !membership.exists {
            return problem(
                "role \(role) does not exist in this database cluster: the migrations make it",
                "run pgpush migrate, then GRANT \(role) TO \(quotedName)")
        }
        if membership.isMember {
            // A member through a NOINHERIT grant has the group only after SET ROLE, which the dashboard does not do.
            return problem(
                "login \(name) is a member of \(role) but does not inherit its privileges (NOINHERIT)",
                "ALTER ROLE \(quotedName) INHERIT (on PostgreSQL 16 and later: GRANT \(role) TO \(quotedName) WITH INHERIT TRUE)")
        }
        let reads = reader.hasPrivileges
            ? "the dashboard reads tables that pgpush_reader cannot read (it may read the views only)"
            : "the dashboard reads the views and tables that \(Self.readRole) may read"
        let acts = "--allow-actions cancels jobs, pauses and resumes apps and writes audit rows"
        let why = !allowActions ? reads : mayRead ? "\(acts), which \(Self.readRole) may not" : "\(reads), and \(acts)"
        return problem("login \(name) is not a member of \(role): \(why)", "GRANT \(role) TO \(quotedName)")
    }
}
