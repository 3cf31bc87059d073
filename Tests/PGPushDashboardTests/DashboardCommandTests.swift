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
            var address: String?
            while address == nil, ContinuousClock.now - started < .seconds(20) {
                address = child.stderrSoFar().firstMatch(of: /address=(http:\/\/127\.0\.0\.1:\d+\/)/).map { String($0.1) }
                if address == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            let base = try #require(address, "the dashboard logged its address: \(child.stderrSoFar())")
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
