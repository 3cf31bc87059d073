import Foundation
import Logging
import PGPushDevelopment
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The throwaway PgBouncer the failover tests re-point, and the store's statements through transaction pooling.
@Suite(.database, .timeLimit(.minutes(2)))
struct PgBouncerTests {
    @Test func repointingMovesNewTransactionsToTheOtherServer() async throws {
        let first = try ThrowawayPostgres.start()
        defer { first.stop() }
        let second = try ThrowawayPostgres.start()
        defer { second.stop() }
        let bouncer = try ThrowawayPgBouncer.start(targetPort: first.port, databases: ["postgres"])
        defer { bouncer.stop() }
        let url = try DatabaseURL(bouncer.url(database: "postgres"))
        let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: 2), backgroundLogger: Logger(label: "pgpush.test"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            func serverPort() async throws -> Int {
                let rows = try await client.query("SELECT inet_server_port()").collect()
                return Int(try rows[0].decode(Int32.self))
            }
            #expect(try await serverPort() == first.port)
            try bouncer.repoint(to: second.port)
            var port = 0
            let deadline = ContinuousClock.now + .seconds(10)
            while port != second.port, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                port = (try? await serverPort()) ?? 0
            }
            #expect(port == second.port, "\(bouncer.log.suffix(2000))")
        }
    }
}

/// Maintenance leadership as a lease row: one holder at a time, renewed by it, taken over once it runs out,
/// and handed over at once on release. Every call here goes through PgBouncer in transaction pooling, where a
/// session advisory lock would not hold.
@Suite(.database, .timeLimit(.minutes(2)))
struct LeaderLeaseTests {
    @Test func oneLeaderAtATimeThroughThePool() async throws {
        try await TestDatabase.with { db in
            try await db.withPooledClient { client in
                let first = QueueStore(client: client, workerID: "a", logger: db.logger)
                let second = QueueStore(client: client, workerID: "b", logger: db.logger)
                #expect(try await first.acquireMaintenanceLeadership(lease: .seconds(2)))
                #expect(try await !second.acquireMaintenanceLeadership(lease: .seconds(2)))
                #expect(try await first.acquireMaintenanceLeadership(lease: .seconds(2)), "the holder renews")
                // Ten contenders at once: the holder stays the only leader.
                let contenders = (0..<10).map { QueueStore(client: client, workerID: "c\($0)", logger: db.logger) }
                let wins = try await withThrowingTaskGroup(of: Bool.self) { group in
                    for contender in contenders { group.addTask { try await contender.acquireMaintenanceLeadership(lease: .seconds(2)) } }
                    return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
                #expect(wins == 0)
                try await Task.sleep(for: .milliseconds(2300))
                #expect(try await second.acquireMaintenanceLeadership(lease: .seconds(30)), "a lapsed lease is taken over")
                #expect(try await !first.acquireMaintenanceLeadership(lease: .seconds(30)))
                try await second.releaseMaintenanceLeadership()
                #expect(try await first.acquireMaintenanceLeadership(lease: .seconds(2)), "a released lease is free at once")
                // The holder's heartbeat renews its leadership, however long its pass takes.
                try await first.registerWorker(hostname: "h", pid: 1)
                _ = try await first.heartbeat(lease: .seconds(30), liveWindow: .seconds(30), holding: [])
                try await Task.sleep(for: .milliseconds(2300))
                #expect(try await !second.acquireMaintenanceLeadership(lease: .seconds(30)), "renewed by the heartbeat")
            }
        }
    }
}

/// Producers that share one pooled login and act for a tenant with `SET LOCAL ROLE`: the grant holds inside
/// the transaction, and the role ends with it, so the next client of the server connection is itself again.
@Suite(.database, .timeLimit(.minutes(2)))
struct PooledTenancyTests {
    @Test func setLocalRoleHoldsTenancyAndDoesNotLeakThroughThePool() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("mine")
            try await db.createApp("theirs")
            // Roles belong to the cluster, not to the test's database: a name of its own.
            let tenant = "tenant_\(db.name.suffix(12))"
            try await db.exec(PostgresQuery(unsafeSQL: "CREATE ROLE \(tenant) NOLOGIN IN ROLE pgpush_producer"))
            try await db.exec("SELECT push.grant_app(\(tenant), 'mine')")
            try await db.withPooledClient(maximumConnections: 1) { client in
                let allowed = try await client.withTransaction(logger: db.logger) { connection in
                    try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL ROLE \(tenant)"), logger: db.logger)
                    let rows = try await connection.query("""
                        SELECT push.enqueue('mine', '{"aps":{"alert":"hi"}}', tokens => ARRAY[\(TestTokens.token(1))])
                        """, logger: db.logger).collect()
                    return try rows[0].decode(Int64.self)
                }
                #expect(allowed > 0)
                await #expect(throws: (any Error).self) {
                    try await client.withTransaction(logger: db.logger) { connection in
                        try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL ROLE \(tenant)"), logger: db.logger)
                        _ = try await connection.query("""
                            SELECT push.enqueue('theirs', '{"aps":{"alert":"hi"}}', tokens => ARRAY[\(TestTokens.token(2))])
                            """, logger: db.logger).collect()
                    }
                }
                // The pool's only server connection serves the next transaction as the login again.
                let rows = try await client.query("SELECT current_user::text, current_setting('role')").collect()
                let (user, role) = try rows[0].decode((String, String).self)
                #expect(user == "postgres" && role == "none", "SET LOCAL ROLE ended with its transaction: \(user) \(role)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE app_id = 'theirs'") == 0)
        }
    }
}
