import Foundation
import PGPushStore
import PGPushTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a command says when it cannot reach its database: the server, the database and the reason, never the
/// password. Also the worker's start-up checks: the metrics port and the database.
@Suite(.database, .timeLimit(.minutes(3)))
struct ConnectionErrorTests {
    /// Each command that connects, with the arguments it needs to get as far as connecting.
    static let connectingCommands: [[String]] = [
        ["migrate"],
        ["stats"],
        ["watch", "1"],
        ["apps", "list"],
        ["apps", "pause", "some-app"],
        ["enqueue", "--app", "some-app", "--alert", "hi"],
        ["devices", "import", "-", "--app", "some-app"],
        ["prune"],
        ["worker", "--metrics-port=-1"],
    ]

    @Test func migrateAgainstAClosedPortSaysTheServerIsUnreachable() async throws {
        let port = try TCPSocket.freePort()
        let password = "closed-port-secret-\(UUID().uuidString.prefix(8))"
        let result = try await CLIProcess.run(
            ["migrate", "--database-url", "postgres://pusher:\(password)@127.0.0.1:\(port)/push_somewhere"], timeout: .seconds(30))
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("127.0.0.1:\(port)"), "\(result)")
        #expect(result.stderr.contains("\"push_somewhere\""), "\(result)")
        #expect(result.stderr.contains("unreachable"), "\(result)")
        #expect(result.stderr.contains("connection refused"), "\(result)")
        #expect(!result.stderr.contains("PSQLError"), "\(result)")
        #expect(!(result.stdout + result.stderr).contains(password), "\(result)")
    }

    @Test func everyCommandNamesADatabaseThatDoesNotExist() async throws {
        var url = try TestDatabase.clusterURL()
        url.database = "pgpush_absent_\(UUID().uuidString.prefix(8).lowercased())"
        // The test cluster trusts every local connection, so the password is never checked; it must still
        // never be printed.
        url.password = "absent-db-secret-\(UUID().uuidString.prefix(8))"
        let raw = "postgres://\(url.username):\(url.password!)@\(url.host):\(url.port)/\(url.database)?sslmode=disable"
        for command in Self.connectingCommands {
            let result = try await CLIProcess.run(command + ["--database-url", raw], timeout: .seconds(30))
            #expect(result.status == 1, "\(command): \(result)")
            #expect(result.stderr.contains("database \"\(url.database)\" does not exist"), "\(command): \(result)")
            #expect(result.stderr.contains("\(url.host):\(url.port)"), "\(command): \(result)")
            #expect(!result.stderr.contains("PSQLError"), "\(command): \(result)")
            #expect(!(result.stdout + result.stderr).contains(url.password!), "\(command): \(result)")
        }
    }

    @Test func aRoleTheServerDoesNotKnowIsAnAuthenticationFailure() async throws {
        var url = try TestDatabase.clusterURL()
        url.username = "pgpush_nobody"
        let password = "unknown-role-secret-\(UUID().uuidString.prefix(8))"
        let raw = "postgres://\(url.username):\(password)@\(url.host):\(url.port)/\(url.database)?sslmode=disable"
        let result = try await CLIProcess.run(["migrate", "--database-url", raw], timeout: .seconds(30))
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("authentication failed"), "\(result)")
        #expect(result.stderr.contains("pgpush_nobody"), "\(result)")
        #expect(!(result.stdout + result.stderr).contains(password), "\(result)")
    }

    @Test func requiredTLSAgainstAServerWithoutItSaysSo() async throws {
        let url = try TestDatabase.clusterURL()
        let raw = "postgres://\(url.username)@\(url.host):\(url.port)/\(url.database)?sslmode=require"
        let result = try await CLIProcess.run(["stats", "--database-url", raw], timeout: .seconds(30))
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("TLS refused"), "\(result)")
        #expect(result.stderr.contains("sslmode=require"), "\(result)")
    }

    /// A second worker on the same host: the default metrics port is taken. It must say which address and
    /// how to pick another, and exit at once as a configuration error.
    @Test func workerOnATakenMetricsPortNamesItAndTheFlag() async throws {
        try await TestDatabase.with { db in
            let taken = try TCPSocket.listening()
            defer { taken.close() }
            let started = ContinuousClock.now
            let result = try await CLIProcess.run(
                ["worker", "--metrics-port", "\(taken.port)", "--database-url", db.urlString], timeout: .seconds(30))
            #expect(ContinuousClock.now - started < .seconds(15), "\(result)")
            #expect(result.status == 64, "\(result)")
            #expect(result.stderr.contains("0.0.0.0:\(taken.port)"), "\(result)")
            #expect(result.stderr.contains("already in use"), "\(result)")
            #expect(result.stderr.contains("--metrics-port 0"), "\(result)")
            #expect(result.stderr.contains("--metrics-port -1"), "\(result)")
            #expect(result.stderr.contains("PGPUSH_METRICS_PORT"), "\(result)")
        }
    }

    /// `--metrics-port -1`, as the help writes it, is a value, as is `--metrics-port=-1`: both get as far as the
    /// database (which does not exist here), never a usage error.
    @Test(arguments: [["--metrics-port", "-1"], ["--metrics-port=-1"]])
    func metricsPortMinusOneParses(_ flag: [String]) async throws {
        var url = try TestDatabase.clusterURL()
        url.database = "pgpush_absent_\(UUID().uuidString.prefix(8).lowercased())"
        let raw = "postgres://\(url.username)@\(url.host):\(url.port)/\(url.database)?sslmode=disable"
        let result = try await CLIProcess.run(["worker"] + flag + ["--database-url", raw], timeout: .seconds(30))
        #expect(result.status == 1, "\(result)")
        #expect(!result.stderr.contains("Missing value"), "\(result)")
        #expect(result.stderr.contains("database \"\(url.database)\" does not exist"), "\(result)")
    }
}

/// A TCP socket on 0.0.0.0: listening (to occupy a port), or just bound and closed (to find a port nobody
/// listens on).
struct TCPSocket {
    let descriptor: Int32
    let port: Int

    /// A socket listening on a free port; `close()` releases it.
    static func listening() throws -> TCPSocket {
        let socket = try bound()
        guard listen(socket.descriptor, 16) == 0 else {
            socket.close()
            throw CLITestError("listen failed: errno \(errno)")
        }
        return socket
    }

    /// A port that was free a moment ago and that nothing listens on.
    static func freePort() throws -> Int {
        let socket = try bound()
        socket.close()
        return socket.port
    }

    private static func bound() throws -> TCPSocket {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw CLITestError("socket failed: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = INADDR_ANY
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            closeDescriptor(descriptor)
            throw CLITestError("bind failed: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        return TCPSocket(descriptor: descriptor, port: Int(UInt16(bigEndian: address.sin_port)))
    }

    func close() {
        closeDescriptor(descriptor)
    }
}

private func closeDescriptor(_ descriptor: Int32) {
    #if canImport(Glibc)
    _ = Glibc.close(descriptor)
    #else
    _ = Darwin.close(descriptor)
    #endif
}
