import Crypto
import Foundation
import Logging
import PGPushSimulator
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// A real deployment in miniature: a fresh migrated database, the APNs simulator in-process over TLS, and
/// `pgpush worker` child processes started from the built executable.
struct Fleet: Sendable {
    let db: TestDatabase
    let simulator: APNsSimulator
    let port: Int
    let keyPath: String
    let directory: String
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"

    static func with(
        cluster: DatabaseURL? = nil,
        configure: @Sendable (inout APNsSimulatorConfiguration) -> Void = { _ in },
        _ body: @Sendable (Fleet) async throws -> Void
    ) async throws {
        try await TestDatabase.with(cluster: cluster) { db in
            let directory = NSTemporaryDirectory() + "pgpush-fleet-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { if ProcessInfo.processInfo.environment["PGPUSH_KEEP_FLEET"] == nil { try? FileManager.default.removeItem(atPath: directory) } }
            let key = P256.Signing.PrivateKey()
            let keyPath = directory + "/AuthKey.p8"
            try key.pemRepresentation.write(toFile: keyPath, atomically: true, encoding: .utf8)

            var configuration = APNsSimulatorConfiguration()
            configuration.certificateDirectory = directory + "/simulator"
            configuration.tokenKeys = [SimulatorTokenKey(teamID: teamID, keyID: keyID, publicKey: key.publicKey)]
            configure(&configuration)
            var logger = Logger(label: "pgpush.test.simulator")
            logger.logLevel = .warning
            let simulator = APNsSimulator(configuration: configuration, logger: logger)
            let port = try await simulator.start()
            let fleet = Fleet(db: db, simulator: simulator, port: port, keyPath: keyPath, directory: directory)
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await simulator.run() }
                    defer { group.cancelAll() }
                    try await body(fleet)
                }
            } catch {
                await simulator.shutdown()
                throw error
            }
            await simulator.shutdown()
        }
    }

    static var executable: String {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/pgpush").path
    }

    /// Runs `pgpush arguments…` to completion (terminated after 30 s) and returns what it printed.
    static func runPGPush(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let base = NSTemporaryDirectory() + "pgpush-cli-\(UUID().uuidString)"
        let out = base + ".out", err = base + ".err"
        FileManager.default.createFile(atPath: out, contents: nil)
        FileManager.default.createFile(atPath: err, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: out); try? FileManager.default.removeItem(atPath: err) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        try process.run()
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning && Date() < deadline { usleep(50_000) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        return (process.terminationStatus, try String(contentsOfFile: out, encoding: .utf8), try String(contentsOfFile: err, encoding: .utf8))
    }

    func createApp(_ id: String = "app", topic: String = "com.example.app", rateLimit: Int? = nil) async throws {
        try await db.exec("""
            INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path, rate_limit)
            VALUES (\(id), \(topic), \(Self.teamID), \(Self.keyID), \(keyPath), \(rateLimit))
            """)
    }

    /// Registers `count` live devices (tokens `<prefix>000…n`), registered a day ago unless told otherwise.
    func registerDevices(_ count: Int, app: String = "app", prefix: String = "", offset: Int = 0, registeredDaysAgo: Double = 1) async throws {
        try await db.exec("""
            INSERT INTO push.devices (app_id, token, registered_at)
            SELECT \(app), \(prefix) || lpad(to_hex(g), 64 - length(\(prefix)), '0'), now() - make_interval(secs => \(registeredDaysAgo * 86400))
              FROM generate_series(\(offset + 1), \(offset + count)) g
            """)
    }

    func enqueue(_ extra: String = "", app: String = "app") async throws -> Int64 {
        try await db.scalar(PostgresQuery(unsafeSQL: "SELECT push.enqueue('\(app)', '{\"aps\":{\"alert\":\"hello\"}}'\(extra))"))
    }

    /// Starts a worker process against this fleet's database and simulator.
    /// `apnsCAFile` replaces the simulator's CA as the one the worker trusts.
    /// `databaseUser` logs the worker in as that user instead of the superuser.
    /// `environment` adds variables to the worker's (which never inherits the test's proxy variables).
    func startWorker(
        _ arguments: [String] = [], id: String = "w-\(UUID().uuidString.prefix(6))", apnsCAFile: String? = nil, databaseUser: String? = nil,
        databaseURL: String? = nil, logFormat: String = "json", logLevel: String = "info", environment: [String: String] = [:]
    ) throws -> WorkerProcess {
        try WorkerProcess(arguments: [
            "worker", "--database-url", databaseURL ?? databaseUser.map(db.urlString(user:)) ?? db.urlString,
            "--apns-endpoint", "https://localhost:\(port)", "--apns-ca-file", apnsCAFile ?? simulator.caCertificatePath,
            "--metrics-port=-1", "--worker-id", id, "--maintenance-interval", "1", "--log-format", logFormat,
            // The in-process simulator of a debug test build answers far slower than APNs; a request it has
            // queued must not time out and be re-sent, which would show up as a duplicate in the ledger.
            "--request-timeout", "60",
            "--log-level", logLevel,
        ] + arguments, logPath: directory + "/\(id).log", environment: environment)
    }

    /// Polls until the job ends; returns its final state.
    func waitForJob(_ id: Int64, timeout: Duration) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let rows = try await db.rows("SELECT state FROM push.jobs WHERE id = \(id)")
            for try await state in rows.decode(String.self) where ["done", "failed", "cancelled"].contains(state) {
                return state
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        Issue.record("job \(id) did not finish within \(timeout)")
        return "timeout"
    }

    func count(_ query: PostgresQuery) async throws -> Int64 { try await db.scalar(query) }
}

/// A `pgpush worker` child process.
final class WorkerProcess: @unchecked Sendable {
    let process = Process()
    let logPath: String

    /// The proxy variables a worker would follow (`--https-proxy`'s environment): a worker gets them only from
    /// its test, never from the machine that runs the tests.
    static let proxyVariables: Set<String> = ["HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"]

    init(arguments: [String], logPath: String, environment: [String: String] = [:]) throws {
        self.logPath = logPath
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.executableURL = URL(fileURLWithPath: Fleet.executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !Self.proxyVariables.contains($0.key) }
            .merging(environment) { $1 }
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// Signals the worker if it is still running: an exited worker's pid may already belong to another process.
    func signal(_ signal: Int32) {
        if process.isRunning { kill(process.processIdentifier, signal) }
    }

    /// Waits for exit within `timeout`; kills and returns nil if it does not exit.
    func waitForExit(timeout: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(50))
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        return process.terminationStatus
    }

    func stop() async {
        if process.isRunning {
            signal(SIGTERM)
            _ = await waitForExit(timeout: .seconds(20))
        }
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
}
