import Foundation
import PGPushTestSupport
import Testing

/// `pgpush dashboard` itself, as a child process: the security rules refuse to start it, and it serves `/`
/// within seconds and stops on SIGTERM.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct DashboardCommandTests {
    static let binary = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".build/debug/pgpush")

    @Test(.network) func refusesToStartWithoutThePasswordWhereTheRulesNeedIt() async throws {
        let url = "postgres://nobody@127.0.0.1:1/none"
        let actions = try await Child.run(["dashboard", "--database-url", url, "--allow-actions", "--port", "0"])
        #expect(actions.status == 64)
        #expect(actions.stderr.contains("PGPUSH_DASHBOARD_PASSWORD"))
        let beyondLoopback = try await Child.run(["dashboard", "--database-url", url, "--bind", "0.0.0.0", "--port", "0"])
        #expect(beyondLoopback.status == 64)
        #expect(beyondLoopback.stderr.contains("PGPUSH_DASHBOARD_PASSWORD"))
        let noDatabase = try await Child.run(["dashboard"], environment: ["PGPUSH_DATABASE_URL": "", "DATABASE_URL": ""])
        #expect(noDatabase.status == 64)
    }

    @Test(.database) func aDatabaseThatDoesNotExistEndsItWithTheReason() async throws {
        var url = try TestDatabase.clusterURL()
        url.database = "pgpush_no_such_database"
        let raw = "postgres://\(url.username)@\(url.host):\(url.port)/\(url.database)?sslmode=disable"
        let result = try await Child.run(["dashboard", "--database-url", raw, "--port", "0"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("database \"pgpush_no_such_database\" does not exist"))
    }

    @Test(.database) func servesTheOverviewWithinSecondsAndStopsOnSIGTERM() async throws {
        try await TestDatabase.with { db in
            _ = try await Seed.standard(db)
            let child = try Child(["dashboard", "--database-url", db.urlString, "--port", "0"])
            defer { child.kill() }
            let started = ContinuousClock.now
            let base = try await child.address()
            #expect(ContinuousClock.now - started < .seconds(10))
            let overview = try await Browser.dumpDOM(base)
            #expect(overview.contains(">mixed</a>") && overview.contains(">news</a>"))
            #expect(overview.contains("BadTopic &lt;script&gt;"))
            #expect(try await HTTPClient.send("POST", base + "jobs/1/cancel").status == 405)
            let status = try await child.terminate()
            #expect(status == 0, "SIGTERM stops it gracefully")
        }
    }
}

extension DashboardCommandTests {
    /// The analyst's login, in the reporting role: told at start (stderr) and on the page that the dashboard needs
    /// pgpush_dashboard, and the grant works without a restart; the dashboard's own login is told nothing.
    @Test(.database) func aReaderLoginIsToldAtStartAndOnThePageThatItNeedsPgpushDashboard() async throws {
        try await TestDatabase.with { db in
            _ = try await Seed.standard(db)
            let reader = try await db.createLogin(memberOf: "pgpush_reader")
            let child = try Child(["dashboard", "--database-url", db.urlString(user: reader), "--port", "0"])
            defer { child.kill() }
            let base = try await child.address()
            let line = "login \(reader) is not a member of pgpush_dashboard: the dashboard reads tables that pgpush_reader cannot read"
                + " (it may read the views only); GRANT pgpush_dashboard TO \(reader)"
            let told = try await child.waitForStderr { $0.contains(line) }
            #expect(told, "stderr: \(child.stderrSoFar())")
            #expect(child.stderrSoFar().components(separatedBy: "is not a member of").count == 2, "one line")

            let page = try await HTTPClient.send("GET", base)
            #expect(page.status == 403)
            #expect(page.body.contains("login \(reader) is not a member of pgpush_dashboard"))
            #expect(page.body.contains("GRANT pgpush_dashboard TO \(reader);"))
            #expect(!page.body.contains("could not answer") && !child.stderrSoFar().contains("could not answer"))
            let browser = try await Browser.dumpDOM(base + "jobs")
            #expect(browser.contains("<pre id=\"login-fix\">GRANT pgpush_dashboard TO \(reader);</pre>"))

            try await db.execute("GRANT pgpush_dashboard TO \(unescaped: reader)")
            let granted = try await HTTPClient.send("GET", base)
            #expect(granted.status == 200 && granted.body.contains(">news</a>"))
            #expect(try await child.terminate() == 0)

            // The dashboard's own login: the normal pages, nothing said about its roles.
            let login = try await db.createLogin(memberOf: "pgpush_dashboard")
            let dashboard = try Child(["dashboard", "--database-url", db.urlString(user: login), "--port", "0"])
            defer { dashboard.kill() }
            let overview = try await HTTPClient.send("GET", try await dashboard.address())
            #expect(overview.status == 200 && overview.body.contains(">mixed</a>"))
            #expect(!dashboard.stderrSoFar().contains("member of"), "\(dashboard.stderrSoFar())")
            #expect(try await dashboard.terminate() == 0)
        }
    }
}

/// A child `pgpush` with its output in temporary files.
final class Child: @unchecked Sendable {
    let process = Process()
    let stderrURL = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-child-\(UUID().uuidString).err")
    private var exited: Int32?
    private let done = DispatchSemaphore(value: 0)

    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        process.executableURL = DashboardCommandTests.binary
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment
            .filter { !$0.key.hasPrefix("PGPUSH_DASHBOARD") }
            .merging(environment) { $1 }
        FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    deinit { try? FileManager.default.removeItem(at: stderrURL) }

    func stderrSoFar() -> String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }

    /// Waits (up to 20 s) for the dashboard's log line with its address, and returns it.
    func address() async throws -> String {
        let started = ContinuousClock.now
        var address: String?
        while address == nil, ContinuousClock.now - started < .seconds(20) {
            address = stderrSoFar().firstMatch(of: /address=(http:\/\/127\.0\.0\.1:\d+\/)/).map { String($0.1) }
            if address == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        return try #require(address, "the dashboard logged its address: \(stderrSoFar())")
    }

    /// Waits (up to 10 s) until standard error satisfies `condition`.
    func waitForStderr(_ condition: (String) -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition(stderrSoFar()) {
            guard ContinuousClock.now < deadline else { return false }
            try await Task.sleep(for: .milliseconds(50))
        }
        return true
    }

    /// Waits for the exit without blocking a thread of the cooperative pool.
    func wait() async -> Int32 {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.process.waitUntilExit()
                continuation.resume(returning: self.process.terminationStatus)
            }
        }
    }

    func terminate() async throws -> Int32 {
        process.terminate()
        return await wait()
    }

    func kill() {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
    }

    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, stderr: String) {
        let child = try Child(arguments, environment: environment)
        let status = await child.wait()
        return (status, child.stderrSoFar())
    }
}
