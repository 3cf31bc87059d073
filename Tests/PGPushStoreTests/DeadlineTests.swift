import Logging
import PGPushCore
import PGPushTestSupport
import PostgresNIO
@testable import PGPushStore
import Testing

@Suite(.timeLimit(.minutes(1)))
struct DeadlineTests {
    /// Waits without noticing cancellation, and without spinning: a cancelled `Task.sleep` returns at once, so a
    /// loop of them would hog a thread of the cooperative pool.
    static func sleepIgnoringCancellation(_ duration: Duration) async {
        await Task.detached { try? await Task.sleep(for: duration) }.value
    }

    @Test func aCallThatHangsIsAbandonedAtItsDeadline() async throws {
        let started = ContinuousClock.now
        await #expect(throws: PGPushError.self) {
            try await withDeadline(.milliseconds(200)) {
                // Ignores cancellation, like a client call stuck on a dead connection.
                await Self.sleepIgnoringCancellation(.seconds(5))
                return 1
            }
        }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test func aCallThatFinishesInTimeKeepsItsResultOrError() async throws {
        #expect(try await withDeadline(.seconds(5)) { 42 } == 42)
        struct Boom: Error {}
        await #expect(throws: Boom.self) { try await withDeadline(.seconds(5)) { () async throws -> Int in throw Boom() } }
    }

    /// A shutdown cancels the loops; a call waiting for a database that is down must not hold them until its
    /// deadline (25 s for a worker), or the shutdown overruns its grace period.
    @Test func cancellingTheCallerEndsTheCallAtOnce() async throws {
        let started = ContinuousClock.now
        let call = Task {
            try await withDeadline(.seconds(30)) {
                await Self.sleepIgnoringCancellation(.seconds(10))
                return 1
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        call.cancel()
        await #expect(throws: CancellationError.self) { try await call.value }
        #expect(ContinuousClock.now - started < .seconds(2))

        // Already cancelled before the call starts.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await withDeadline(.seconds(30)) { () async throws -> Int in
                try await Task.sleep(for: .seconds(10))
                return 1
            }
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(ContinuousClock.now - started < .seconds(3))
    }

    /// A statement the worker gave up on must stop holding locks on the server too, and no statement of the
    /// worker's may spend its time in JIT compilation.
    @Test func workerConnectionsCarryServerSideLimits() async throws {
        try await TestDatabase.with { db in
            let url = try DatabaseURL(db.urlString)
            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 1, serverTimeouts: .worker),
                                        backgroundLogger: Logger(label: "pgpush.test"))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                var settings: [String] = []
                for name in ["statement_timeout", "lock_timeout", "jit"] {
                    let rows = try await client.query(PostgresQuery(unsafeSQL: "SELECT current_setting('\(name)')"))
                    for try await value in rows.decode(String.self) { settings.append(value) }
                }
                #expect(settings == ["20s", "5s", "off"])
            }
        }
    }
}

/// The CLI's connections (progress lines, `stats`, bench) read the views an analyst reads; PostgreSQL must not
/// JIT-compile each read.
@Suite(.timeLimit(.minutes(1))) struct SessionParameterTests {
    @Test func everyConnectionPGPushOpensHasJITOff() async throws {
        try await TestDatabase.with { db in
            let url = try DatabaseURL(db.urlString)
            let connection = try await PostgresConnection.connect(
                configuration: try url.connectionConfiguration(), id: 1, logger: Logger(label: "pgpush.test"))
            defer { Task { try? await connection.close() } }
            var single: [String] = []
            for try await value in try await connection.query("SELECT current_setting('jit')", logger: Logger(label: "pgpush.test"))
                .decode(String.self) { single.append(value) }
            #expect(single == ["off"])

            let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 1),
                                        backgroundLogger: Logger(label: "pgpush.test"))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                var pooled: [String] = []
                for try await value in try await client.query("SELECT current_setting('jit')").decode(String.self) { pooled.append(value) }
                #expect(pooled == ["off"], "without server timeouts too")
            }
        }
    }
}
