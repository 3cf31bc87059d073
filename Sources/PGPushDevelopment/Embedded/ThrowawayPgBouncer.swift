import Foundation
import PGPushCore
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway PgBouncer in front of a PostgreSQL port, for tests and benchmarks of the pooled topology.
///
/// Same recipe as `scripts/pg-env.sh`: Debian's `pgbouncer`, a generated ini with a wildcard database (every
/// database of the server, by name), `auth_type = any` logging in as `postgres`, and `pool_mode` and
/// `default_pool_size` as asked. As root it runs as the `postgres` user. ``repoint(to:)`` rewrites the ini and
/// reloads it, the way operators move a stable address to a promoted standby.
public final class ThrowawayPgBouncer: @unchecked Sendable {
    public let port: Int
    public let poolMode: String
    public let poolSize: Int
    private let directory: String
    private let executable: String
    private let lock = NSLock()
    private var targetPort: Int
    private let databases: [String]
    private var running = false

    /// `postgres://postgres@127.0.0.1:<port>/<database>` through this pooler.
    public func url(database: String) -> String {
        "postgres://postgres@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    /// Starts PgBouncer in front of `127.0.0.1:targetPort`. `databases` get entries of their own (a reload
    /// re-points those for certain); every other database is reached through the wildcard.
    public static func start(
        targetPort: Int, databases: [String] = [], poolMode: String = "transaction", poolSize: Int = 4
    ) throws -> ThrowawayPgBouncer {
        guard let executable = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer"]
            .first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            throw PGPushError(.invalidConfiguration, "PgBouncer is not installed: apt-get install pgbouncer")
        }
        let bouncer = ThrowawayPgBouncer(
            directory: try makeTemporaryDirectory(prefix: "pgpush-pgbouncer-"), executable: executable,
            port: try freeLoopbackPort(), targetPort: targetPort, databases: databases, poolMode: poolMode, poolSize: poolSize)
        do {
            try bouncer.launch()
            return bouncer
        } catch {
            bouncer.stop()
            throw error
        }
    }

    private init(directory: String, executable: String, port: Int, targetPort: Int, databases: [String], poolMode: String, poolSize: Int) {
        self.databases = databases
        self.directory = directory
        self.executable = executable
        self.port = port
        self.targetPort = targetPort
        self.poolMode = poolMode
        self.poolSize = poolSize
    }

    private var iniPath: String { "\(directory)/pgbouncer.ini" }
    private var pidPath: String { "\(directory)/pgbouncer.pid" }
    public var logPath: String { "\(directory)/pgbouncer.log" }

    private func launch() throws {
        try handToPostgresUser(directory)
        try writeIni()
        let status = try spawnAsPostgresUser(executable, ["-d", iniPath], outputPath: "\(directory)/start.log")
        guard status == 0 else {
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            throw PGPushError(.invalidConfiguration, "pgbouncer failed to start (exit \(status)): \(log.suffix(2000))")
        }
        lock.withLock { running = true }
        // It daemonises before it listens; wait for the port.
        let deadline = Date().addingTimeInterval(10)
        while !loopbackPortAccepts(port) {
            guard Date() < deadline else { throw PGPushError(.invalidConfiguration, "pgbouncer did not listen on \(port)") }
            usleep(20_000)
        }
    }

    private func writeIni() throws {
        let target = lock.withLock { targetPort }
        let entries = databases.map { "\($0) = host=127.0.0.1 port=\(target) dbname=\($0) user=postgres\n" }.joined()
        let ini = """
            [databases]
            \(entries)* = host=127.0.0.1 port=\(target) user=postgres
            [pgbouncer]
            listen_addr = 127.0.0.1
            listen_port = \(port)
            unix_socket_dir =
            auth_type = any
            pool_mode = \(poolMode)
            default_pool_size = \(poolSize)
            max_client_conn = 1000
            server_connect_timeout = 3
            server_login_retry = 1
            logfile = \(logPath)
            pidfile = \(pidPath)

            """
        try ini.write(toFile: iniPath, atomically: true, encoding: .utf8)
        try handToPostgresUser(iniPath)
    }

    /// Points the pooler at another server (`RELOAD`, by SIGHUP): new server connections go there, and the
    /// old ones are closed as they are released.
    public func repoint(to port: Int) throws {
        lock.withLock { targetPort = port }
        try writeIni()
        guard let pid = self.pid else { throw PGPushError(.invalidConfiguration, "pgbouncer is not running") }
        kill(pid, SIGHUP)
    }

    /// What PgBouncer logged so far (for a failing test's message).
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    private var pid: pid_t? { daemonPID(pidPath) }

    /// Stops PgBouncer and removes its directory. Safe to call twice.
    public func stop() {
        let wasRunning = lock.withLock { () -> Bool in
            defer { running = false }
            return running
        }
        if wasRunning { terminateDaemon(pidFile: pidPath) }
        try? FileManager.default.removeItem(atPath: directory)
    }
}
