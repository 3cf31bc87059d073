import Foundation
import Hummingbird
import PGPushCore
import PGPushStore
import PostgresNIO
import Synchronization

/// The dashboard's login against the groups it needs (`pgpush_dashboard`, `pgpush_dashboard_actions` with
/// `--allow-actions`). Checked at start (one log line when something is missing; the dashboard serves anyway),
/// then before each page and action for as long as something is missing, so a `GRANT` takes effect on the next
/// page without a restart; and again whenever the database refuses a statement for want of a privilege
/// (SQLSTATE 42501), so a revoke is explained too. While the login has what it needs, no page pays for a check.
extension DashboardServer {
    /// What the last check found.
    enum LoginState: Sendable, Equatable {
        /// No check has answered yet (the database was unreachable, say).
        case unchecked
        case fine
        case lacking(LoginProblem)
    }

    /// The outcome of one check.
    enum LoginCheck: Sendable {
        case fine(DashboardLogin)
        case lacking(LoginProblem)
        /// The check itself failed (the database did not answer): nothing is known.
        case unknown
    }

    /// Runs the check and logs a change: the first problem found (at start, usually), a different one, or its fix.
    @discardableResult
    func checkLogin(atStart: Bool = false) async -> LoginCheck {
        let login: DashboardLogin
        do {
            login = try await store.login()
        } catch {
            if atStart {
                logger.warning(
                    "could not check the dashboard login's roles at start; each page checks them until one answers",
                    metadata: ["error": "\(String(reflecting: error))"])
            }
            return .unknown
        }
        let problem = login.problem(allowActions: configuration.allowActions)
        let next: LoginState = problem.map { .lacking($0) } ?? .fine
        let previous = loginState.withLock { state in
            defer { state = next }
            return state
        }
        if previous != next {
            if let problem {
                let consequence = problem.blocksPages
                    ? "until then every page answers 403 with this"
                    : "until then the actions answer 403 with this and the pages say so"
                logger.error(
                    "\(problem.line) (\(consequence); the grant takes effect on the next page, no restart needed)",
                    metadata: ["login": "\(problem.login)", "role": "\(problem.role)"])
            } else if case .lacking(let old) = previous {
                logger.notice(
                    "login \(login.name) now has the privileges of \(old.role): the dashboard reads again",
                    metadata: ["login": "\(login.name)", "role": "\(old.role)"])
            } else if atStart {
                logger.info(
                    "dashboard login checked",
                    metadata: ["login": "\(login.name)", "superuser": "\(login.isSuperuser)"])
            }
        }
        return problem.map { .lacking($0) } ?? .fine(login)
    }

    /// The login's problem before a page or an action: none without a query once a check found it fine;
    /// checked anew while something is (or may be) missing. Nil too when the check cannot answer: the page
    /// then runs and reports the database as it finds it.
    func currentLoginProblem() async -> LoginProblem? {
        if loginState.withLock({ $0 }) == .fine { return nil }
        if case .lacking(let problem) = await checkLogin() { return problem }
        return nil
    }

    /// SQLSTATE 42501, insufficient_privilege ("permission denied for table apps").
    static func isPermissionDenied(_ error: any Error) -> Bool {
        sqlState(error) == "42501"
    }

    static func sqlState(_ error: any Error) -> String? {
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] }
        if let error = error as? PostgresTransactionError {
            return (error.closureError ?? error.beginError ?? error.commitError).flatMap(sqlState)
        }
        if let error = error as? PGPushError { return error.underlying.flatMap(sqlState) }
        return nil
    }

    static func serverMessage(_ error: any Error) -> String? {
        if let error = error as? PSQLError { return error.serverInfo?[.message] }
        if let error = error as? PostgresTransactionError {
            return (error.closureError ?? error.beginError ?? error.commitError).flatMap(serverMessage)
        }
        if let error = error as? PGPushError { return error.underlying.flatMap(serverMessage) }
        return nil
    }

    /// The answer to a statement the database refused for want of a privilege: the login's roles, checked
    /// anew, say which group it lacks; if it has them all, the group itself lacks a grant.
    /// - Parameter context: the page's, for an HTML answer; nil for an action (plain text).
    func permissionDenied(_ error: any Error, page: String, context: PageContext?) async -> Response {
        let refusal = Self.serverMessage(error) ?? "permission denied"
        logger.warning("dashboard page: permission denied", metadata: ["page": "\(page)", "error": "\(refusal)"])
        let action = context == nil
        let role = action ? DashboardLogin.actionsRole : DashboardLogin.readRole
        let check = await checkLogin()
        if case .lacking(let problem) = check, problem.blocksPages || action {
            return forbidden(problem, context)
        }
        let refused = "the database refused this \(action ? "action" : "page") (\(refusal); SQLSTATE 42501)"
        let login: String? = switch check {
        case .fine(let login): login.name
        case .lacking(let problem): problem.login  // only the actions lack their group: the pages' is there
        case .unknown: nil
        }
        guard let login else {
            return Self.text(.forbidden, "\(refused): the dashboard's login needs the privileges of \(role); GRANT \(role) TO the login\n")
        }
        return Self.text(
            .forbidden,
            "\(refused) although login \(login) has the privileges of \(role): that group lacks a privilege the dashboard needs;"
                + " apply the migrations (pgpush migrate), which grant them\n")
    }

    /// 403 with the login's problem: a page in the layout for a browser, one line for an export or an action.
    func forbidden(_ problem: LoginProblem, _ context: PageContext?) -> Response {
        guard let context, context.query["format"] != "csv", context.query["format"] != "json" else {
            return Self.text(.forbidden, problem.line + "\n")
        }
        let body: HTML = """
            <p id="login-problem" class="bad">\(problem.summary).</p>
            <p>The dashboard reads as its own database login. A database administrator can fix it with:</p>
            <pre id="login-fix">\(problem.statement)</pre>
            <p class="note">The next page reads with the new role: the dashboard need not restart.</p>
            """
        // Live: once the grant is in, the script's next refresh swaps the page's content in.
        let page = Page(title: "The dashboard's login lacks \(problem.role)", body: body, tables: [], live: true)
        var response = Self.respond(page, context)
        response.status = .forbidden
        return response
    }
}
