import Foundation
import Logging
import PGPushCore
import PGPushStore
import PostgresNIO
import Testing

/// A fresh, migrated database on the throwaway cluster that `scripts/test` starts, dropped afterwards.
///
/// The cluster's URL comes from `PGPUSH_TEST_DATABASE_URL` (a superuser connection to `postgres`). Every test
/// gets its own database, so tests run in parallel without seeing each other's rows.
public struct TestDatabase: Sendable {
    public let name: String
    public let url: DatabaseURL
    public let client: PostgresClient
    public let logger: Logger

    /// The admin URL of the throwaway cluster.
    public static func clusterURL() throws -> DatabaseURL {
        guard let raw = ProcessInfo.processInfo.environment["PGPUSH_TEST_DATABASE_URL"] else {
            throw PGPushError(.invalidConfiguration, TestTier.isFull
                ? "PGPUSH_TEST_DATABASE_URL is not set: run the tests with scripts/test"
                : "this test needs PostgreSQL but is in the fast tier: give it (or its suite) the .database trait")
        }
        var url = try DatabaseURL(raw)
        url.sslMode = .disable
        return url
    }

    /// Creates and migrates a database, runs `body` with a connected client, then drops the database.
    public static func with<T: Sendable>(
        migrate: Bool = true,
        cluster: DatabaseURL? = nil,
        _ body: @Sendable (TestDatabase) async throws -> T
    ) async throws -> T {
        var logger = Logger(label: "pgpush.test")
        logger.logLevel = .warning
        let admin = try cluster ?? clusterURL()
        let name = "pgpush_test_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased())"
        do {
            try await Self.admin(admin, logger: logger) { connection in
                try await connection.query("CREATE DATABASE \(unescaped: name)", logger: logger)
            }
        } catch {
            throw PGPushError(.internal, "creating the test database failed: \(serverMessage(of: error) ?? String(reflecting: error))")
        }
        var url = admin
        url.database = name
        let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 8), backgroundLogger: logger)
        let database = TestDatabase(name: name, url: url, client: client, logger: logger)
        do {
            let result = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                if migrate {
                    _ = try await client.withConnection { connection in
                        try await Migrator(logger: logger).migrate(connection: connection)
                    }
                }
                return try await body(database)
            }
            try await drop(name, admin: admin, logger: logger)
            return result
        } catch {
            try? await drop(name, admin: admin, logger: logger)
            throw error
        }
    }

    private static func drop(_ name: String, admin: DatabaseURL, logger: Logger) async throws {
        try await Self.admin(admin, logger: logger) { connection in
            try await connection.query("DROP DATABASE IF EXISTS \(unescaped: name) WITH (FORCE)", logger: logger)
        }
    }

    static func admin(
        _ url: DatabaseURL, logger: Logger, _ body: (PostgresConnection) async throws -> Void
    ) async throws {
        let configuration = PostgresConnection.Configuration(
            host: url.host, port: url.port, username: url.username, password: url.password,
            database: url.database, tls: .disable)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        do {
            try await body(connection)
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// Opens a connection to this database as a fresh login user that is a member of `role` only
    /// (e.g. `pgpush_producer`), to test what that role may and may not do.
    public func connect(asMemberOf role: String) async throws -> PostgresConnection {
        try await connect(as: createLogin(memberOf: role))
    }

    /// Creates a login user that is a member of `role` only, and returns its name.
    public func createLogin(memberOf role: String) async throws -> String {
        let user = "u_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased())"
        _ = try await client.query("CREATE ROLE \(unescaped: user) LOGIN IN ROLE \(unescaped: role)", logger: logger).collect()
        return user
    }

    /// Opens a connection to this database as `user` (trust authentication, no password).
    public func connect(as user: String) async throws -> PostgresConnection {
        let configuration = PostgresConnection.Configuration(
            host: url.host, port: url.port, username: user, password: nil, database: name, tls: .disable)
        return try await PostgresConnection.connect(configuration: configuration, id: 2, logger: logger)
    }

    /// A URL string for child processes (the worker, the CLI) to reach this database.
    public var urlString: String { urlString(user: url.username) }

    /// A URL string for child processes that log in as `user` (see ``createLogin(memberOf:)``).
    public func urlString(user: String) -> String {
        "postgres://\(user)@\(url.host):\(url.port)/\(name)?sslmode=disable"
    }

    /// Runs one statement to completion; errors surface here (a row sequence only throws when read).
    @discardableResult
    public func exec(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await client.query(query, logger: logger).collect()
    }

    /// Runs one statement for its rows, to be decoded as a sequence.
    public func rows(_ query: PostgresQuery) async throws -> PostgresRowSequence {
        try await client.query(query, logger: logger)
    }

    /// Runs one statement and returns its single Int64 value (for counts in assertions).
    public func scalar(_ query: PostgresQuery) async throws -> Int64 {
        let rows = try await client.query(query, logger: logger)
        for try await value in rows.decode(Int64.self) {
            return value
        }
        throw PGPushError(.internal, "query returned no rows")
    }

    /// Polls `query` (one Int64) until it returns `expected`, for at most `timeout`, and records an issue if it
    /// never does: a wait for something to happen, instead of a fixed sleep.
    public func waitUntil(
        _ query: PostgresQuery, is expected: Int64 = 0, timeout: Duration = .seconds(20),
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let deadline = ContinuousClock.now + timeout
        var last: Int64 = -1
        while ContinuousClock.now < deadline {
            last = try await scalar(query)
            if last == expected { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("\(query.sql) returned \(last), not \(expected), within \(timeout)", sourceLocation: sourceLocation)
    }

    /// Waits until no chunk's lease is still running.
    public func waitUntilLeasesRanOut(timeout: Duration = .seconds(20), sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try await waitUntil("SELECT count(*) FROM push.chunks WHERE locked_until >= now()", timeout: timeout, sourceLocation: sourceLocation)
    }

    /// Inserts a token-auth app whose key path need not exist (for tests that never send).
    public func createApp(
        _ id: String = "app",
        topic: String = "com.example.app",
        environment: String = "production",
        privateKeyPath: String = "/nonexistent/key.p8",
        teamID: String = "TEAM123456",
        keyID: String = "KEY1234567",
        rateLimit: Int? = nil
    ) async throws {
        try await exec("""
            INSERT INTO push.apps (id, topic, environment, team_id, key_id, private_key_path, rate_limit)
            VALUES (\(id), \(topic), \(environment), \(teamID), \(keyID), \(privateKeyPath), \(rateLimit))
            """)
    }
}

/// Deterministic, valid-looking 64-hex device tokens for tests.
public enum TestTokens {
    public static func token(_ index: Int, prefix: String = "") -> String {
        let body = String(format: "%016llx", UInt64(index)) + String(repeating: "a", count: 48)
        return String((prefix + body).prefix(64))
    }
}

extension PSQLError {
    /// The server's message, for asserting on validation errors.
    public var serverMessage: String? { serverInfo?[.message] }
}

/// The PostgreSQL server message of an error thrown by a query, unwrapping transaction errors.
public func serverMessage(of error: any Error) -> String? {
    if let error = error as? PSQLError { return error.serverMessage }
    if let error = error as? PostgresTransactionError, let closure = error.closureError { return serverMessage(of: closure) }
    return nil
}

/// The PgBouncer instances `scripts/test` starts in front of the cluster: transaction pooling with 4 server
/// connections per database, and session pooling (what LISTEN needs). Missing outside `scripts/test`; a test
/// of the pooled topology then fails rather than skips.
public enum TestPgBouncer {
    public static func port(_ variable: String) throws -> Int {
        guard let raw = ProcessInfo.processInfo.environment[variable], let port = Int(raw) else {
            throw PGPushError(.invalidConfiguration, "\(variable) is not set: run the tests with scripts/test, which starts PgBouncer")
        }
        return port
    }
}

extension TestDatabase {
    /// This database through PgBouncer in transaction pooling.
    public func pooledURLString(user: String = "postgres") throws -> String {
        "postgres://\(user)@127.0.0.1:\(try TestPgBouncer.port("PGPUSH_TEST_PGBOUNCER_PORT"))/\(name)?sslmode=disable"
    }

    /// This database through PgBouncer in session pooling.
    public func sessionPooledURLString() throws -> String {
        "postgres://postgres@127.0.0.1:\(try TestPgBouncer.port("PGPUSH_TEST_PGBOUNCER_SESSION_PORT"))/\(name)?sslmode=disable"
    }

    /// A client through PgBouncer in transaction pooling, run for the length of `body`.
    public func withPooledClient<T: Sendable>(
        maximumConnections: Int = 4, _ body: @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        try await withTestClient(try pooledURLString(), maximumConnections: maximumConnections, logger: logger, body)
    }
}

/// A client of `url` (any server of a test: a pooler, a standby), run for the length of `body`.
public func withTestClient<T: Sendable>(
    _ url: String, maximumConnections: Int = 2, logger: Logger? = nil, _ body: @Sendable (PostgresClient) async throws -> T
) async throws -> T {
    var quiet = Logger(label: "pgpush.test")
    quiet.logLevel = .error
    let client = PostgresClient(
        configuration: try DatabaseURL(url).clientConfiguration(maximumConnections: maximumConnections), backgroundLogger: logger ?? quiet)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await client.run() }
        defer { group.cancelAll() }
        return try await body(client)
    }
}
