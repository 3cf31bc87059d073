import Foundation
import Hummingbird
import Logging
import Metrics
import PGPushStore
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// `pgpush dashboard`: the web dashboard as a swift-service-lifecycle `Service` (Hummingbird's application runs
/// inside its `run()`, and stops with the group's graceful shutdown). Run it in a group after the
/// `PostgresClient` it reads through.
public final class DashboardServer: Service, Sendable {
    public let configuration: DashboardConfiguration
    let store: DashboardStore
    let logger: Logger
    let overviewCache: SnapshotCache<DashboardOverview>
    let outcomesCache: SnapshotCache<[DashboardOutcome]>
    /// The outcomes of whole UTC days that ended a while ago: they no longer change, so a week's or a month's
    /// range reads only its newest day and the partial first one again. Kept an hour, so that the days retention
    /// drops leave the page within the hour.
    let closedDays = SnapshotCache<[DashboardOutcome]>(ttl: .seconds(3600), capacity: 512)
    let prunedCache: SnapshotCache<[DashboardPrunedCount]>
    private let boundPort = Mutex<Int?>(nil)
    /// The login's roles as last checked (``checkLogin(atStart:)``).
    let loginState = Mutex<LoginState>(.unchecked)

    /// - Parameters:
    ///   - configuration: validated here: ``DashboardConfiguration/validate()`` throws before anything listens.
    ///   - client: the dashboard's pool; its statements run with ``DashboardConfiguration/statementTimeout``.
    public init(configuration: DashboardConfiguration, client: PostgresClient, logger: Logger) throws(DashboardError) {
        try configuration.validate()
        self.configuration = configuration
        self.store = DashboardStore(client: client, statementTimeout: configuration.statementTimeout, logger: logger)
        self.logger = logger
        self.overviewCache = SnapshotCache(ttl: configuration.overviewCacheTTL)
        self.outcomesCache = SnapshotCache(ttl: configuration.overviewCacheTTL)
        self.prunedCache = SnapshotCache(ttl: configuration.overviewCacheTTL)
    }

    /// The port actually bound, once listening (useful with port 0).
    public var localPort: Int? { boundPort.withLock { $0 } }

    public func run() async throws {
        let router = Router(context: BasicRequestContext.self)
        let auth = configuration.password.flatMap { $0.isEmpty ? nil : BasicAuth(user: configuration.user, password: $0) }
        router.add(middleware: SecurityMiddleware(auth: auth, allowActions: configuration.allowActions, logger: logger))
        let routes = configuration.basePath.isEmpty ? router.group() : router.group(RouterPath(configuration.basePath))
        addRoutes(routes)
        // With a base path, the group's "/" answers both `/pgpush` and `/pgpush/` (the router ignores a trailing slash).
        let app = Application(
            router: router,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
            onServerRunning: { [self, logger, configuration] channel in
                let port = channel.localAddress?.port
                self.boundPort.withLock { $0 = port }
                logger.notice(
                    "dashboard listening",
                    metadata: [
                        "address": "http://\(configuration.host):\(port ?? configuration.port)\(configuration.basePath)/",
                        "actions": "\(configuration.allowActions)", "authentication": "\(auth != nil)",
                    ])
            },
            logger: logger)
        // The login's roles, checked beside the server starting (a database that does not answer must not delay
        // it): one log line when a group is missing. The pages explain it as well, so the dashboard serves anyway.
        // Unstructured so that stopping cancels the check without waiting for it (an `async let` would wait).
        let check = Task { await self.checkLogin(atStart: true) }
        defer { check.cancel() }
        do {
            try await app.runService()
        } catch let error as IOError {
            throw DashboardError(.bind, "cannot listen on \(configuration.host):\(configuration.port): \(error)")
        }
    }

    // MARK: Routes

    private func addRoutes(_ routes: RouterGroup<BasicRequestContext>) {
        routes.get("/") { [self] request, _ in try await page("overview", request) { try await self.overview($0) } }
        routes.get("/apps/:id") { [self] request, context in
            let id = try context.parameters.require("id")
            return try await page("app", request) { try await self.app(id, $0) }
        }
        routes.get("/jobs") { [self] request, _ in try await page("jobs", request) { try await self.jobs($0) } }
        routes.get("/jobs/:id") { [self] request, context in
            let id = try context.parameters.require("id", as: Int64.self)
            return try await page("job", request) { try await self.job(id, $0) }
        }
        routes.get("/outcomes") { [self] request, _ in try await page("outcomes", request) { try await self.outcomes($0) } }
        routes.get("/pruned") { [self] request, _ in try await page("pruned", request) { try await self.pruned($0) } }
        routes.get("/audit") { [self] request, _ in try await page("audit", request) { try await self.audit($0) } }
        routes.get("/assets/app.css") { _, _ in Self.asset(Assets.css, type: "text/css; charset=utf-8") }
        routes.get("/assets/app.js") { _, _ in Self.asset(Assets.js, type: "text/javascript; charset=utf-8") }
        if configuration.allowActions {
            addActions(routes)
        }
    }

    private func pageContext(_ request: Request) -> PageContext {
        PageContext(
            basePath: configuration.basePath, query: FormData(request.uri.query), allowActions: configuration.allowActions,
            refreshSeconds: configuration.refreshSeconds)
    }

    private func overview(_ context: PageContext) async throws -> Page? {
        let store = self.store
        let snapshot = try await overviewCache.get("overview") { try await store.read { try await $0.overview() } }
        return OverviewPage.render(snapshot, context)
    }

    private func app(_ id: String, _ context: PageContext) async throws -> Page? {
        let minimum = configuration.valveMinimumAnswers
        guard let detail = try await store.read({ try await $0.app(id, minimumAnswers: minimum) }) else { return nil }
        return AppPage.render(detail, context, valveShare: configuration.valveShare, minimumAnswers: minimum)
    }

    private func jobs(_ context: PageContext) async throws -> Page? {
        let filter = JobsPage.filter(context.query, pageSize: configuration.pageSize)
        let rows = try await store.read { try await $0.jobs(filter) }
        return JobsPage.render(rows, filter: filter, context)
    }

    private func job(_ id: Int64, _ context: PageContext) async throws -> Page? {
        guard let detail = try await store.read({ try await $0.job(id) }) else { return nil }
        return JobPage.render(detail, context)
    }

    private func outcomes(_ context: PageContext) async throws -> Page? {
        let q = context.query
        let range = OutcomesPage.range(q)
        let now = Date()
        let platform = Platforms.parse(q["platform"])
        let (app, reason, store) = (q["app"], q["reason"], self.store)
        let key = [range.key, app ?? "", platform ?? "", reason ?? ""].joined(separator: "\u{0}")
        let windows = OutcomesPage.dayWindows(from: now.addingTimeInterval(-range.seconds), to: now.addingTimeInterval(60))
        let rows = try await outcomesCache.get(key) {
            // One statement per UTC day (one partition each), run side by side on the pool's connections: one
            // aggregate over a week runs on one core, these on all of them. The days are disjoint, so their rows
            // only need sorting together (each day is read in its own snapshot).
            let closedDays = self.closedDays
            let perDay = try await withThrowingTaskGroup(of: [DashboardOutcome].self) { group in
                for (from, to) in windows {
                    group.addTask {
                        let read: @Sendable () async throws -> [DashboardOutcome] = {
                            try await store.read { try await $0.outcomes(from: from, to: to, app: app, platform: platform, reason: reason) }
                        }
                        guard OutcomesPage.isClosedDay(from: from, to: to, now: now) else { return try await read() }
                        let dayKey = ["\(Int(from.timeIntervalSince1970))", app ?? "", platform ?? "", reason ?? ""].joined(separator: "\u{0}")
                        return try await closedDays.get(dayKey, read)
                    }
                }
                return try await group.reduce(into: [DashboardOutcome]()) { $0 += $1 }
            }
            return Array(OutcomesPage.sorted(perDay).prefix(1000))
        }
        return OutcomesPage.render(rows, context)
    }

    private func pruned(_ context: PageContext) async throws -> Page? {
        let app = context.query["app"]
        let since = Date().addingTimeInterval(-30 * 86_400)
        let store = self.store
        let counts = try await prunedCache.get(app ?? "") { try await store.read { try await $0.prunedCounts(since: since, app: app) } }
        let recent = try await store.read { try await $0.recentlyPruned(app: app, limit: 100) }
        return PrunedPage.render(counts, recent, context)
    }

    private func audit(_ context: PageContext) async throws -> Page? {
        let limit = configuration.pageSize
        let app = context.query["app"]
        let before = context.query["before"].flatMap { Int64($0) }
        let rows = try await store.read { try await $0.audit(app: app, before: before, limit: limit) }
        return AuditPage.render(rows, limit: limit, context)
    }

    // MARK: Responses

    /// Renders a page as HTML, or one of its tables as CSV or JSON (`?format=…&table=…`); counts and times it.
    /// While the login lacks the group the pages read with, every page answers 403 saying so (``forbidden(_:_:)``).
    private func page(_ name: String, _ request: Request, _ load: (PageContext) async throws -> Page?) async throws -> Response {
        let started = ContinuousClock.now
        var context = pageContext(request)
        let response: Response
        let problem = await currentLoginProblem()
        if let problem, problem.blocksPages {
            // The page's statements would be refused: say which group the login lacks instead.
            response = forbidden(problem, context)
        } else {
            context.loginNotice = problem
            do {
                if let page = try await load(context) {
                    response = Self.respond(page, context)
                } else {
                    response = Self.text(.notFound, "not found (or not one of the apps this login may see)\n")
                }
            } catch where Self.isPermissionDenied(error) {
                response = await permissionDenied(error, page: name, context: context)
            } catch {
                response = failure(error, page: name)
            }
        }
        let elapsed = ContinuousClock.now - started
        Counter(label: "pgpush_dashboard_requests_total", dimensions: [("page", name), ("status", "\(response.status.code)")]).increment()
        Metrics.Timer(label: "pgpush_dashboard_render_seconds", dimensions: [("page", name)]).record(duration: elapsed)
        return response
    }

    static func respond(_ page: Page, _ context: PageContext) -> Response {
        if let format = context.query["format"], format == "csv" || format == "json" {
            let name = context.query["table"]
            guard let table = page.tables.first(where: { $0.name == name }) ?? (name == nil ? page.tables.first : nil) else {
                return text(.notFound, "no such table on this page\n")
            }
            let file = "\(table.name).\(format)"
            return Response(
                status: .ok,
                headers: [
                    .contentType: format == "csv" ? "text/csv; charset=utf-8" : "application/json",
                    .contentDisposition: "attachment; filename=\"\(file)\"",
                ],
                body: .init(byteBuffer: ByteBuffer(string: format == "csv" ? table.csv : table.json)))
        }
        return Response(
            status: .ok, headers: [.contentType: "text/html; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: Layout.document(page, context).rendered)))
    }

    /// A database failure as a short page; the details go to the log (PostgresNIO's errors name no password).
    func failure(_ error: any Error, page: String) -> Response {
        let state = (error as? PSQLError)?.serverInfo?[.sqlState]
            ?? ((error as? PostgresTransactionError)?.closureError as? PSQLError)?.serverInfo?[.sqlState]
        if state == "57014" {
            logger.warning("dashboard page ran past its statement_timeout", metadata: ["page": "\(page)"])
            return Self.text(.serviceUnavailable, "the database took too long for this page (statement_timeout); narrow the filters\n")
        }
        if let problem = DatabaseProblem.of(error), problem == .unreachable || problem == .shuttingDown {
            logger.warning("dashboard page: database unavailable", metadata: ["page": "\(page)", "error": "\(String(reflecting: error))"])
            return Self.text(.serviceUnavailable, "\(problem.description); try this page again shortly\n")
        }
        logger.error("dashboard page failed", metadata: ["page": "\(page)", "error": "\(String(reflecting: error))"])
        return Self.text(.internalServerError, "the database could not answer this page; see the dashboard's log\n")
    }

    static func text(_ status: HTTPResponse.Status, _ message: String) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: message)))
    }

    static func asset(_ text: String, type: String) -> Response {
        Response(
            status: .ok, headers: [.contentType: type, .cacheControl: "max-age=300"],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}
