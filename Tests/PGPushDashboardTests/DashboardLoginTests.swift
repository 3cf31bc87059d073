import Foundation
import Logging
import PGPushDashboard
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Synchronization
import Testing

/// The dashboard's database login without the group it needs: the reporting role (`pgpush_reader`) reads the
/// views only, the pages read tables too. The dashboard says so once in its log at start and on every page
/// (403, the group and the GRANT), instead of "the database could not answer"; a grant or a revoke takes effect
/// on the next page.
@Suite(.database, .serialized, .timeLimit(.minutes(2)))
struct DashboardLoginTests {
    static let pages = ["/", "/apps/news", "/jobs", "/jobs?app=news&state=queued", "/outcomes", "/outcomes?range=7d", "/pruned", "/audit"]

    @Test func aReaderLoginIsToldOnEveryPageThatTheDashboardNeedsPgpushDashboard() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            let login = try await db.createLogin(memberOf: "pgpush_reader")
            let log = LogCapture()
            let logger = log.logger()
            try await withTestClient(db.urlString(user: login)) { client in
                try await DashboardHarness.with(DashboardHarness.configuration(), client: client, logger: logger) { dashboard in
                    let line = "login \(login) is not a member of pgpush_dashboard: the dashboard reads tables that pgpush_reader"
                        + " cannot read (it may read the views only); GRANT pgpush_dashboard TO \(login)"

                    // At start: one log line naming the login, the group and the grant.
                    try await log.waitFor { $0.contains { $0.level == .error && $0.message.hasPrefix(line) } }
                    #expect(log.entries.filter { $0.message.contains("is not a member of") }.count == 1)
                    let started = try #require(log.entries.first { $0.message.hasPrefix(line) })
                    #expect(started.message.contains("no restart needed"), "\(started.message)")

                    // Every page: 403, the group and the GRANT; never the generic database error.
                    for path in Self.pages + ["/jobs/\(jobs.queued)"] {
                        let reply = try await HTTPClient.send("GET", dashboard.base + path)
                        #expect(reply.status == 403, "\(path): \(reply.status) \(reply.body)")
                        #expect(reply.body.contains("login \(login) is not a member of pgpush_dashboard"), "\(path)")
                        #expect(reply.body.contains("<pre id=\"login-fix\">GRANT pgpush_dashboard TO \(login);</pre>"), "\(path)")
                        #expect(!reply.body.contains("could not answer"), "\(path)")
                    }
                    // An export asks for a file: one plain line.
                    let export = try await HTTPClient.send("GET", dashboard.base + "/jobs?format=json&table=jobs")
                    #expect(export.status == 403)
                    #expect(export.header("Content-Type")?.hasPrefix("text/plain") == true)
                    #expect(export.body == line + "\n")
                    // In a browser: the page in the dashboard's layout.
                    let page = try await Browser.dumpDOM(dashboard.base + "/")
                    #expect(page.contains("<title>The dashboard's login lacks pgpush_dashboard · pgpush</title>"))
                    #expect(try #require(page.element(id: "login-problem", tag: "p")).contains(
                        "login \(login) is not a member of pgpush_dashboard: the dashboard reads tables that pgpush_reader cannot read"))
                    #expect(log.entries.filter { $0.message.contains("is not a member of") }.count == 1, "logged once, not per page")

                    // The grant, without a restart: the next page reads.
                    try await db.execute("GRANT pgpush_dashboard TO \(unescaped: login)")
                    let overview = try await HTTPClient.send("GET", dashboard.base + "/")
                    #expect(overview.status == 200)
                    #expect(overview.body.contains(">mixed</a>") && !overview.body.contains("login-problem"))
                    for path in Self.pages {
                        #expect(try await HTTPClient.send("GET", dashboard.base + path).status == 200, "\(path)")
                    }
                    #expect(log.entries.contains { $0.level == .notice && $0.message.contains("now has the privileges of pgpush_dashboard") })

                    // A revoke while it runs: the page's statement is refused (42501) and explained the same way.
                    try await db.execute("REVOKE pgpush_dashboard FROM \(unescaped: login)")
                    let revoked = try await HTTPClient.send("GET", dashboard.base + "/jobs")
                    #expect(revoked.status == 403, "\(revoked.body)")
                    #expect(revoked.body.contains("GRANT pgpush_dashboard TO \(login);"))
                    try await db.execute("GRANT pgpush_dashboard TO \(unescaped: login)")
                    #expect(try await HTTPClient.send("GET", dashboard.base + "/jobs").status == 200)

                    // The group itself missing a privilege (the login has the group): the refusal, not the generic error.
                    try await db.execute("REVOKE SELECT ON push.apps FROM pgpush_dashboard")
                    let refused = try await HTTPClient.send("GET", dashboard.base + "/apps/news")
                    #expect(refused.status == 403)
                    #expect(refused.body == "the database refused this page (permission denied for table apps; SQLSTATE 42501)"
                        + " although login \(login) has the privileges of pgpush_dashboard: that group lacks a privilege the dashboard"
                        + " needs; apply the migrations (pgpush migrate), which grant them\n")
                    #expect(try await HTTPClient.send("GET", dashboard.base + "/audit").status == 200, "a page that reads no apps still reads")
                }
            }
        }
    }

    @Test func aDashboardLoginReadsAndWithAllowActionsIsToldItNeedsPgpushDashboardActions() async throws {
        try await TestDatabase.with { db in
            let jobs = try await Seed.standard(db)
            let login = try await db.createLogin(memberOf: "pgpush_dashboard")
            let credentials = ("admin", "correct horse")

            // Read-only: the normal pages, nothing logged about the login's roles.
            let quiet = LogCapture()
            try await withTestClient(db.urlString(user: login)) { client in
                try await DashboardHarness.with(DashboardHarness.configuration(), client: client, logger: quiet.logger()) { dashboard in
                    for path in Self.pages {
                        let reply = try await HTTPClient.send("GET", dashboard.base + path)
                        #expect(reply.status == 200, "\(path): \(reply.body)")
                        #expect(!reply.body.contains("login-notice") && !reply.body.contains("login-problem"), "\(path)")
                    }
                    #expect(try await Browser.dumpDOM(dashboard.base + "/").contains(">news</a>"))
                }
            }
            #expect(!quiet.entries.contains { $0.message.contains("member of") }, "\(quiet.entries.map(\.message))")

            // --allow-actions: the log line at start; the pages read and say the actions will be refused; an action is.
            let log = LogCapture()
            let configuration = DashboardHarness.configuration {
                $0.allowActions = true
                $0.password = credentials.1
            }
            try await withTestClient(db.urlString(user: login)) { client in
                try await DashboardHarness.with(configuration, client: client, logger: log.logger()) { dashboard in
                    let line = "login \(login) is not a member of pgpush_dashboard_actions: --allow-actions cancels jobs, pauses and"
                        + " resumes apps and writes audit rows, which pgpush_dashboard may not; GRANT pgpush_dashboard_actions TO \(login)"
                    try await log.waitFor { $0.contains { $0.level == .error && $0.message.hasPrefix(line) } }
                    let jobPage = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(jobs.queued)", credentials: credentials)
                    #expect(jobPage.status == 200)
                    #expect(jobPage.body.contains("<p id=\"login-notice\" class=\"bad\">The actions will be refused: login \(login)"
                        + " is not a member of pgpush_dashboard_actions"))
                    let origin = dashboard.base
                    let cancel = try await HTTPClient.send(
                        "POST", dashboard.base + "/jobs/\(jobs.queued)/cancel", credentials: credentials, headers: ["Origin": origin])
                    #expect(cancel.status == 403)
                    #expect(cancel.body == line + "\n")
                    #expect(try await db.strings("SELECT state FROM push.jobs WHERE id = \(jobs.queued)") == ["queued"])

                    // The grant: the next action runs, the notice is gone.
                    try await db.execute("GRANT pgpush_dashboard_actions TO \(unescaped: login)")
                    let done = try await HTTPClient.send(
                        "POST", dashboard.base + "/jobs/\(jobs.queued)/cancel", credentials: credentials, headers: ["Origin": origin])
                    #expect(done.status == 303, "\(done.body)")
                    #expect(try await db.strings("SELECT state FROM push.jobs WHERE id = \(jobs.queued)") == ["cancelled"])
                    let after = try await HTTPClient.send("GET", dashboard.base + "/jobs/\(jobs.queued)", credentials: credentials)
                    #expect(after.status == 200 && !after.body.contains("login-notice"))
                }
            }
        }
    }
}

/// The dashboard's log, kept in memory.
final class LogCapture: Sendable {
    struct Entry: Sendable {
        let level: Logger.Level
        let message: String
    }

    private let stored = Mutex<[Entry]>([])

    var entries: [Entry] { stored.withLock { $0 } }

    func logger() -> Logger {
        var logger = Logger(label: "pgpush.test.dashboard") { _ in Handler(capture: self) }
        logger.logLevel = .info
        return logger
    }

    func append(_ entry: Entry) { stored.withLock { $0.append(entry) } }

    /// Waits (up to 10 s) until the entries satisfy `condition`.
    func waitFor(_ condition: ([Entry]) -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition(entries) {
            guard ContinuousClock.now < deadline else {
                throw DashboardHarness.HarnessFailure("not logged; the log: \(entries.map(\.message))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .info

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            capture.append(Entry(level: event.level, message: "\(event.message)"))
        }
    }
}
