import Foundation
import PGPushCore
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway PostgreSQL cluster in a temporary directory, for `pgpush demo`, `pgpush bench broadcast` and the
/// tests that stop and start a server of their own. A development tool: no production module links it.
///
/// Same recipe as `scripts/pg-env.sh`: `initdb` with trust authentication, a free loopback port, the Unix socket
/// inside the cluster directory, durability switched off (the data is thrown away). `initdb` and `postgres`
/// refuse to run as root, so as root they run as the `postgres` user through `runuser`. Missing binaries are an
/// error that tells the user to install the `postgresql` package; nothing is installed behind their back.
public final class ThrowawayPostgres: @unchecked Sendable {
    /// The cluster directory (data, logs, socket); removed by ``stop()``.
    public let directory: String
    public let port: Int
    private let binaries: String
    private var running = false
    private let lock = NSLock()

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    public var url: String { "postgres://postgres@127.0.0.1:\(port)/postgres?sslmode=disable" }

    /// Creates and starts a cluster; on failure everything created so far is removed. `prepare` runs after
    /// `initdb` and before the server starts, with the data directory (a test adding TLS or `pg_hba.conf` rules).
    public static func start(prepare: ((_ dataDirectory: String) throws -> Void)? = nil) throws -> ThrowawayPostgres {
        guard let binaries = binaryDirectory() else {
            throw PGPushError(.invalidConfiguration, 
                "PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or on PATH): "
                    + "install the postgresql package (apt-get install postgresql) or pass --database-url")
        }
        let directory = try makeTemporaryDirectory(prefix: "pgpush-pg-")
        let cluster = ThrowawayPostgres(directory: directory, port: try freeLoopbackPort(), binaries: binaries)
        do {
            try cluster.initialise(prepare: prepare)
            return cluster
        } catch {
            cluster.stop()
            throw error
        }
    }

    private init(directory: String, port: Int, binaries: String) {
        self.directory = directory
        self.port = port
        self.binaries = binaries
    }

    private func initialise(prepare: ((_ dataDirectory: String) throws -> Void)?) throws {
        try takeOwnership()
        try runTool("initdb", ["-D", "\(directory)/data", "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"],
                    log: "\(directory)/initdb.log")
        let settings = """

            listen_addresses = '127.0.0.1'
            port = \(port)
            unix_socket_directories = '\(directory)'
            max_connections = 300
            shared_buffers = 256MB
            fsync = off
            synchronous_commit = off
            full_page_writes = off
            log_min_messages = warning

            """
        try appendSettings(settings)
        try prepare?("\(directory)/data")
        lock.withLock { running = true }
        try runTool("pg_ctl", ["-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60", "start"],
                    log: "\(directory)/pg_ctl.log")
    }

    /// Stops the server (immediate mode: nothing worth keeping) and removes the directory. Safe to call twice.
    public func stop() {
        let wasRunning = lock.withLock { () -> Bool in
            defer { running = false }
            return running
        }
        if wasRunning {
            try? runTool("pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "-t", "30", "stop"], log: nil)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Stops the server but keeps the cluster (a test simulating an outage).
    public func stopServer() throws {
        try runTool("pg_ctl", ["-D", "\(directory)/data", "-m", "fast", "-w", "-t", "60", "stop"], log: nil)
    }

    /// Starts a server stopped by ``stopServer()`` again, on the same port.
    public func startServer() throws {
        try runTool("pg_ctl", ["-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60", "start"], log: nil)
    }

    /// A hot standby of this cluster, streaming from it: `pg_basebackup -R` into a new directory, started on a
    /// port of its own (a test of failover or of reports on a replica). Stop it like any cluster.
    public func makeStandby() throws -> ThrowawayPostgres {
        let directory = try makeTemporaryDirectory(prefix: "pgpush-standby-")
        let standby = ThrowawayPostgres(directory: directory, port: try freeLoopbackPort(), binaries: binaries)
        do {
            try standby.takeOwnership()
            try standby.runTool("pg_basebackup", [
                "-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-D", "\(directory)/data", "-R", "-X", "stream", "-c", "fast",
            ], log: nil)
            // The copied postgresql.conf names the primary's port and socket; later lines win.
            try standby.appendSettings("""

                port = \(standby.port)
                unix_socket_directories = '\(directory)'
                hot_standby = on

                """)
            standby.lock.withLock { standby.running = true }
            try standby.startServer()
            return standby
        } catch {
            standby.stop()
            throw error
        }
    }

    /// Promotes a standby made by ``makeStandby()`` to a primary, and waits until it takes writes.
    public func promote() throws {
        try runTool("pg_ctl", ["-D", "\(directory)/data", "-w", "-t", "60", "promote"], log: nil)
    }

    /// Stops the server the way a crash does (`pg_ctl -m immediate`): no checkpoint, clients cut off at once.
    /// The cluster is kept; ``stop()`` still removes it.
    public func crash() throws {
        try runTool("pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "-t", "60", "stop"], log: nil)
    }

    private func takeOwnership() throws {
        try handToPostgresUser(directory)
        chmod(directory, 0o700)
    }

    private func appendSettings(_ settings: String) throws {
        let configuration = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(directory)/data/postgresql.conf"))
        try configuration.seekToEnd()
        try configuration.write(contentsOf: Data(settings.utf8))
        try configuration.close()
    }

    /// Runs one PostgreSQL tool to completion (as `postgres` when root); a non-zero exit throws with its output.
    ///
    /// posix_spawn and waitpid rather than Foundation's `Process`: `pg_ctl start` leaves a daemon behind that
    /// inherits the descriptors, and `Process` only notices an exit once every inherited descriptor is closed.
    private func runTool(_ tool: String, _ arguments: [String], log: String?) throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-\(tool)-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: output) }
        let status = try spawnAsPostgresUser("\(binaries)/\(tool)", arguments, outputPath: output.path)
        guard status == 0 else {
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            let serverLog = log.flatMap { _ in try? String(contentsOfFile: "\(directory)/server.log", encoding: .utf8) } ?? ""
            throw PGPushError(.invalidConfiguration, "\(tool) failed (exit \(status)): \(text)\(serverLog)")
        }
    }

    /// The newest `/usr/lib/postgresql/<version>/bin`, else the directory of `initdb` on PATH.
    public static func binaryDirectory() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap { Int($0) }.sorted()
        for version in versions.reversed() where FileManager.default.isExecutableFile(atPath: "\(root)/\(version)/bin/initdb") {
            return "\(root)/\(version)/bin"
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") where FileManager.default.isExecutableFile(atPath: "\(directory)/initdb") {
            return String(directory)
        }
        return nil
    }
}


/// Hands `path` to the `postgres` user when running as root: initdb, postgres and pgbouncer refuse to run as
/// root, and run as that user in directories it owns.
func handToPostgresUser(_ path: String) throws {
    guard getuid() == 0 else { return }
    guard let account = getpwnam("postgres") else {
        throw PGPushError(.invalidConfiguration, "running as root needs a `postgres` user to own \(path) (the postgresql package creates it)")
    }
    guard chown(path, account.pointee.pw_uid, account.pointee.pw_gid) == 0 else {
        throw PGPushError(.invalidConfiguration, "cannot hand \(path) to the postgres user: errno \(errno)")
    }
}

/// Runs `executable` to completion with ``spawnAndWait(executable:arguments:outputPath:)``, as the `postgres`
/// user (through runuser) when running as root.
func spawnAsPostgresUser(_ executable: String, _ arguments: [String], outputPath: String) throws -> Int32 {
    if getuid() == 0 {
        return try spawnAndWait(
            executable: "/usr/sbin/runuser", arguments: ["runuser", "-u", "postgres", "--", executable] + arguments, outputPath: outputPath)
    }
    let name = URL(fileURLWithPath: executable).lastPathComponent
    return try spawnAndWait(executable: executable, arguments: [name] + arguments, outputPath: outputPath)
}

/// A fresh directory under the system temporary directory.
public func makeTemporaryDirectory(prefix: String) throws -> String {
    var template = Array((NSTemporaryDirectory() + prefix + "XXXXXX").utf8CString)
    guard let result = mkdtemp(&template) else {
        throw PGPushError(.invalidConfiguration, "cannot create a temporary directory: errno \(errno)")
    }
    return String(cString: result)
}

/// A loopback TCP port that was free a moment ago (bound to port 0, then released).
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw PGPushError(.invalidConfiguration, "socket() failed: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw PGPushError(.invalidConfiguration, "cannot find a free port: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// The process id a daemon wrote to `path`, if it did.
func daemonPID(_ path: String) -> pid_t? {
    (try? String(contentsOfFile: path, encoding: .utf8)).flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
}

/// Sends SIGTERM to the daemon whose pid file is `path` and waits up to `timeout` seconds for it to exit.
func terminateDaemon(pidFile path: String, timeout: TimeInterval = 5) {
    guard let pid = daemonPID(path) else { return }
    kill(pid, SIGTERM)
    let deadline = Date().addingTimeInterval(timeout)
    while kill(pid, 0) == 0, Date() < deadline { usleep(20_000) }
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` (a daemon that is up).
func loopbackPortAccepts(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    return withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

/// Runs a program with standard output and error appended to `outputPath` and standard input from /dev/null;
/// returns its exit status (128 + signal number when killed).
func spawnAndWait(executable: String, arguments: [String], outputPath: String) throws -> Int32 {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    posix_spawn_file_actions_adddup2(&actions, 1, 2)
    // The child starts with no signal blocked and every handler at its default: a daemon it leaves behind
    // (pg_ctl's postgres, pgbouncer -d) would otherwise inherit the mask of the thread that spawned it, and
    // never see the SIGHUP that tells it to reload.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    posix_spawnattr_setsigmask(&attributes, &empty)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signal in [SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, executable, &actions, &attributes, &argv, environ)
    guard spawned == 0 else { throw PGPushError(.invalidConfiguration, "cannot start \(executable): error \(spawned)") }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
        guard errno == EINTR else { throw PGPushError(.invalidConfiguration, "waitpid for \(executable) failed: errno \(errno)") }
    }
    // WIFEXITED / WEXITSTATUS / WTERMSIG by hand: the C macros are not imported.
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
}
