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
            try await withDeadline(.milliseconds(200)) { _ in
                // Ignores cancellation, like a client call stuck on a dead connection.
                await Self.sleepIgnoringCancellation(.seconds(5))
                return 1
            }
        }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test func aCallThatFinishesInTimeKeepsItsResultOrError() async throws {
        #expect(try await withDeadline(.seconds(5)) { _ in 42 } == 42)
        struct Boom: Error {}
        await #expect(throws: Boom.self) { try await withDeadline(.seconds(5)) { _ async throws -> Int in throw Boom() } }
    }

    /// PostgresNIO drops a query written to a connection that has just closed, and its caller would wait until
    /// the deadline: a call that watches its connection ends at the next check once that connection closes.
    @Test(.database) func aCallWhoseConnectionClosesEndsAtTheNextCheck() async throws {
        try await TestDatabase.with { db in
            let started = ContinuousClock.now
            let error = await #expect(throws: PGPushError.self) {
                try await withDeadline(.seconds(30), checkEvery: .milliseconds(200)) { watch in
                    try await db.client.withConnection { connection in
                        watch.watch(connection)
                        try await connection.close()
                        // As a dropped query would: never answers, ignores cancellation.
                        await Self.sleepIgnoringCancellation(.seconds(10))
                    }
                }
            }
            #expect(error?.code == .databaseUnavailable)
            #expect("\(error.map { String(describing: $0) } ?? "")".contains("closed"), "\(String(describing: error))")
            #expect(ContinuousClock.now - started < .seconds(3))
        }
    }

    /// The check ends only calls whose connection closed: a healthy statement longer than several checks runs
    /// to its end.
    @Test(.database) func aLongCallOnAnOpenConnectionOutlastsItsChecks() async throws {
        try await TestDatabase.with { db in
            let logger = db.logger
            let value = try await withDeadline(.seconds(10), checkEvery: .milliseconds(100)) { watch in
                try await db.client.withConnection { connection in
                    watch.watch(connection)
                    defer { watch.unwatch() }
                    let rows = try await connection.query("SELECT 7::int8 FROM pg_sleep(0.6)", logger: logger).collect()
                    return try rows.first?.decode(Int64.self)
                }
            }
            #expect(value == 7)
        }
    }

    /// A shutdown cancels the loops; a call waiting for a database that is down must not hold them until its
    /// deadline (25 s for a worker), or the shutdown overruns its grace period.
    @Test func cancellingTheCallerEndsTheCallAtOnce() async throws {
        let started = ContinuousClock.now
        let call = Task {
            try await withDeadline(.seconds(30)) { _ in
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
            return try await withDeadline(.seconds(30)) { _ async throws -> Int in
                try await Task.sleep(for: .seconds(10))
                return 1
            }
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(ContinuousClock.now - started < .seconds(3))
    }

    /// A statement the worker gave up on must stop holding locks on the server too, and no statement of the
    /// worker's may spend its time in JIT compilation. The limits are set per transaction, so that they hold
    /// through PgBouncer and never follow a pooled server connection to its next client.
    @Test(.database) func workerTransactionsCarryServerSideLimitsThatEndWithThem() async throws {
        try await TestDatabase.with { db in
            let store = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            let inside = try await store.transaction { connection in
                var settings: [String] = []
                for name in ["statement_timeout", "lock_timeout", "jit"] {
                    let rows = try await connection.query(PostgresQuery(unsafeSQL: "SELECT current_setting('\(name)')"), logger: db.logger)
                    for try await value in rows.decode(String.self) { settings.append(value) }
                }
                return settings
            }
            #expect(inside == ["20s", "5s", "off"])
            // The same pool's next statement, outside the transaction, has the server's defaults again.
            let after = try await db.client.withConnection { connection in
                var values: [String] = []
                for try await value in try await connection.query("SELECT current_setting('statement_timeout')", logger: db.logger)
                    .decode(String.self) { values.append(value) }
                return values
            }
            #expect(after == ["0"])
        }
    }
}

/// pgpush connects through PgBouncer, which refuses startup parameters it does not know; and the CLI's
/// connections (progress lines, `stats`, bench) read views an analyst reads, which PostgreSQL must not
/// JIT-compile on each read.
@Suite(.database, .timeLimit(.minutes(1))) struct SessionParameterTests {
    @Test func noStartupParametersAndJITOffByTheDatabaseSetting() async throws {
        try await TestDatabase.with { db in
            let url = try DatabaseURL(db.urlString)
            #expect(try url.clientConfiguration().options.additionalStartupParameters.isEmpty)
            #expect(try url.connectionConfiguration().options.additionalStartupParameters.isEmpty)
            let connection = try await PostgresConnection.connect(
                configuration: try url.connectionConfiguration(), id: 1, logger: Logger(label: "pgpush.test"))
            defer { Task { try? await connection.close() } }
            var single: [String] = []
            for try await value in try await connection.query("SELECT current_setting('jit')", logger: Logger(label: "pgpush.test"))
                .decode(String.self) { single.append(value) }
            #expect(single == ["off"], "migration 0015 sets jit = off for the database")
        }
    }
}
