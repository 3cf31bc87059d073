import Foundation
import PGPushCore
import PGPushStore

/// A PostgreSQL cluster of a test's own, for tests that stop and start the server. Made with `initdb` and
/// `pg_ctl` like the one `scripts/test` starts (as the `postgres` OS user when running as root).
public final class ThrowawayCluster: Sendable {
    public let directory: String
    public let port: Int
    let binaries: String

    public init() throws {
        guard let binaries = ProcessInfo.processInfo.environment["PGPUSH_TEST_PG_BIN"] ?? Self.findBinaries() else {
            throw PGPushError(.invalidConfiguration, "PostgreSQL binaries not found (set PGPUSH_TEST_PG_BIN)")
        }
        self.binaries = binaries
        self.directory = "/tmp/pgpush-cluster-\(UUID().uuidString.prefix(8))"
        self.port = Int.random(in: 20_000...40_000)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if getuid() == 0 {
            try Self.run("/bin/chown", ["postgres:postgres", directory])
        }
        try run("initdb", ["-D", directory + "/data", "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"])
        let settings = """
            listen_addresses = '127.0.0.1'
            port = \(port)
            unix_socket_directories = '\(directory)'
            fsync = off
            synchronous_commit = off
            """
        let conf = directory + "/data/postgresql.conf"
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: conf))
        handle.seekToEndOfFile()
        handle.write(Data(settings.utf8))
        try handle.close()
        try start()
    }

    public var adminURL: DatabaseURL {
        get throws { try DatabaseURL("postgres://postgres@127.0.0.1:\(port)/postgres?sslmode=disable") }
    }

    public func start() throws {
        try run("pg_ctl", ["-D", directory + "/data", "-l", directory + "/server.log", "-w", "-t", "60", "start"])
    }

    public func stop() throws {
        try run("pg_ctl", ["-D", directory + "/data", "-m", "fast", "-w", "stop"])
    }

    public func remove() {
        try? run("pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func run(_ tool: String, _ arguments: [String]) throws {
        if getuid() == 0 {
            try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", binaries + "/" + tool] + arguments)
        } else {
            try Self.run(binaries + "/" + tool, arguments)
        }
    }

    private static func run(_ executable: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw PGPushError(.internal, "\(executable) \(arguments.first ?? "") exited with \(process.terminationStatus)")
        }
    }

    private static func findBinaries() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return versions.sorted { $0.compare($1, options: .numeric) == .orderedAscending }.last.map { "\(root)/\($0)/bin" }
    }
}
