import Foundation
import Hummingbird
import PGPushStore

/// The POST routes, which exist only with `--allow-actions`. ``SecurityMiddleware`` has already checked the
/// password and refused cross-site requests. Each goes through the statements the CLI uses, is audited naming
/// the dashboard user, and answers with a redirect back to the page (a reload does not repeat it).
extension DashboardServer {
    func addActions(_ routes: RouterGroup<BasicRequestContext>) {
        routes.post("/jobs/:id/cancel") { [self] _, context in
            let id = try context.parameters.require("id", as: Int64.self)
            return try await act("cancel") {
                switch try await self.store.cancelJob(id, user: self.configuration.user) {
                case .done, .unchanged: return Self.redirect(self.configuration.basePath + "/jobs/\(id)")
                case .notFound: return Self.text(.notFound, "unknown job\n")
                }
            }
        }
        routes.post("/jobs/:id/resend") { [self] _, context in
            let id = try context.parameters.require("id", as: Int64.self)
            return try await act("resend") {
                switch try await self.store.resendFailed(id, user: self.configuration.user) {
                case .created(let resent): return Self.redirect(self.configuration.basePath + "/jobs/\(resent)")
                case .nothingToResend: return Self.redirect(self.configuration.basePath + "/jobs/\(id)?resend=none")
                case .notFound: return Self.text(.notFound, "unknown job\n")
                case .refused(let message): return Self.text(.conflict, message + "\n")
                }
            }
        }
        routes.post("/apps/:id/pause") { [self] request, context in
            let id = try context.parameters.require("id")
            var request = request
            let form = FormData(String(buffer: try await request.collectBody(upTo: 16 * 1024)))
            guard let reason = form["reason"], reason.count <= 500 else {
                return Self.text(.badRequest, "a pause needs a reason (at most 500 characters)\n")
            }
            return try await act("pause") {
                switch try await self.store.pauseApp(id, reason: "paused from the dashboard: " + reason, user: self.configuration.user) {
                case .done, .unchanged: return Self.redirect(self.configuration.basePath + "/apps/" + FormData.percentEncode(id))
                case .notFound: return Self.text(.notFound, "unknown app\n")
                }
            }
        }
        routes.post("/apps/:id/resume") { [self] _, context in
            let id = try context.parameters.require("id")
            return try await act("resume") {
                switch try await self.store.resumeApp(id, user: self.configuration.user) {
                case .done, .unchanged: return Self.redirect(self.configuration.basePath + "/apps/" + FormData.percentEncode(id))
                case .notFound: return Self.text(.notFound, "unknown app\n")
                }
            }
        }
    }

    /// Runs an action, unless the login lacks `pgpush_dashboard_actions`: then 403 saying so (as for a refusal
    /// of the database, SQLSTATE 42501, found out while running it).
    private func act(_ name: String, _ body: () async throws -> Response) async throws -> Response {
        if let problem = await currentLoginProblem() {
            logger.warning("dashboard action refused: \(problem.line)", metadata: ["action": "\(name)", "user": "\(configuration.user)"])
            return forbidden(problem, nil)
        }
        do {
            let response = try await body()
            logger.notice("dashboard action", metadata: ["action": "\(name)", "user": "\(configuration.user)", "status": "\(response.status.code)"])
            return response
        } catch where Self.isPermissionDenied(error) {
            return await permissionDenied(error, page: name, context: nil)
        } catch {
            return failure(error, page: name)
        }
    }

    static func redirect(_ location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location])
    }
}
