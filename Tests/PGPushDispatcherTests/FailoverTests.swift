import Foundation
import PGPushDevelopment
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// A database that dies and comes back as another server behind a stable address: a streaming standby made
/// with `pg_basebackup -R`, the primary stopped the way a crash stops it, the standby promoted, and PgBouncer
/// re-pointed by rewriting its ini and reloading it.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(6)))
    struct FailoverTests {
        /// Two workers through PgBouncer, a 30,000-device broadcast, and a failover at a third of it. Both
        /// workers survive it without a restart; the broadcast finishes on the new primary within 60 s of the
        /// promote, one outcome per token; every token reaches APNs at least once, and what is sent again stays
        /// within what the workers had in flight. A job enqueued after the promote finishes too.
        @Test func aBroadcastFinishesAcrossAFailoverThroughPgBouncer() async throws {
            try await Self.withStandbyBehindPgBouncer(devices: 30_000) { fleet, primary, standby, bouncer in
                let pooled = bouncer.url(database: fleet.db.name)
                let maxInFlight = 2000
                let workers = try (0..<2).map { index in
                    try fleet.startWorker(
                        ["--listen-database-url", "none", "--poll-interval", "0.2", "--max-in-flight", "\(maxInFlight)"],
                        id: "failover-\(index)", databaseURL: pooled)
                }
                let job = try await withTestClient(pooled) { try await PooledTopologyTests.enqueue($0, "") }
                let deadline = ContinuousClock.now + .seconds(90)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 10_000, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }

                try primary.crash()
                try standby.promote()
                try bouncer.repoint(to: standby.port)
                let promoted = ContinuousClock.now

                let promotedURL = "postgres://postgres@127.0.0.1:\(standby.port)/\(fleet.db.name)?sslmode=disable"
                let after = try await withTestClient(pooled) {
                    try await PooledTopologyTests.enqueue($0, ", tokens => ARRAY['\(TestTokens.token(1, prefix: "dd"))']")
                }
                try await withTestClient(promotedURL) { client in
                    var state = ""
                    while ContinuousClock.now < promoted + .seconds(60) {
                        state = try await Self.scalarText(client, "SELECT state FROM push.jobs WHERE id = \(job)")
                        if state == "done" { break }
                        try await Task.sleep(for: .milliseconds(200))
                    }
                    let took = ContinuousClock.now - promoted
                    #expect(state == "done", "the broadcast ended \(state) \(took) after the promote: \(workers[0].log.suffix(2000))")
                    while ContinuousClock.now < promoted + .seconds(90),
                          try await Self.scalarText(client, "SELECT state FROM push.jobs WHERE id = \(after)") != "done" {
                        try await Task.sleep(for: .milliseconds(200))
                    }
                    #expect(try await Self.scalarText(client, "SELECT state FROM push.jobs WHERE id = \(after)") == "done")
                    #expect(try await Self.scalar(client, "SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 30_000)
                    #expect(try await Self.scalar(client, "SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 30_000)
                    #expect(try await Self.scalar(client, "SELECT total FROM push.jobs WHERE id = \(job)") == 30_000)
                }
                let entries = fleet.simulator.ledger.entries
                let distinct = Set(entries.map(\.token)).count
                #expect(distinct == 30_001, "every live token reached APNs at least once")
                let resent = entries.count - distinct
                print("failover: \(resent) notifications sent again (bound: \(2 * maxInFlight) in flight)")
                #expect(resent <= 2 * maxInFlight, "re-sent \(resent), more than the two workers had in flight")
                for worker in workers {
                    #expect(worker.process.isRunning, "survived the failover without a restart: \(worker.log.suffix(1500))")
                    #expect(worker.log.contains("database unavailable"), "the failover was noticed and said once: \(worker.log.suffix(1500))")
                    #expect(worker.log.contains("database available again"))
                }
                for worker in workers { worker.signal(SIGTERM) }
                for worker in workers {
                    #expect(await worker.waitForExit(timeout: .seconds(40)) == 0, "\(worker.log.suffix(1500))")
                }
                // The test database is dropped through the old primary's address: bring it back (alone, thrown away).
                try primary.startServer()
            }
        }

        /// A worker whose stable address points at a read-only standby for 20 s: `/readyz` answers 503 and the
        /// log says the database is read-only, at most every few seconds; pointed back, it becomes ready and
        /// finishes the broadcast with one outcome per token. Reports run on the standby meanwhile.
        @Test func pointedAtAStandbyTheWorkerWaitsNotReadyAndLosesNothing() async throws {
            try await Self.withStandbyBehindPgBouncer(devices: 8000) { fleet, primary, standby, bouncer in
                let pooled = bouncer.url(database: fleet.db.name)
                let port = try freeLoopbackPort()
                let worker = try fleet.startWorker(
                    ["--listen-database-url", "none", "--poll-interval", "0.2", "--metrics-port=\(port)", "--metrics-host", "127.0.0.1"],
                    databaseURL: pooled)
                defer { Task { await worker.stop() } }
                let job = try await fleet.enqueue()
                let deadline = ContinuousClock.now + .seconds(60)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 1000, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(try await MetricsEndpointTests.get(port, "/readyz").0 == 200)

                try bouncer.repoint(to: standby.port)
                let repointed = ContinuousClock.now
                var ready = 200
                while ready == 200, ContinuousClock.now < repointed + .seconds(15) {
                    try await Task.sleep(for: .milliseconds(200))
                    ready = (try? await MetricsEndpointTests.get(port, "/readyz").0) ?? 0
                }
                #expect(ready == 503, "/readyz while the address points at a standby")
                // Reports work on the standby: stats, and the views an analyst reads.
                let standbyURL = "postgres://postgres@127.0.0.1:\(standby.port)/\(fleet.db.name)?sslmode=disable"
                let stats = try Fleet.runPGPush(["stats", "--database-url", standbyURL, "--json"])
                #expect(stats.status == 0, "pgpush stats on a standby: \(stats.stderr)")
                #expect(stats.stdout.contains("\"deliveries\""))
                try await withTestClient(standbyURL) { client in
                    _ = try await Self.scalar(client, "SELECT count(*) FROM push.job_progress")
                    _ = try await Self.scalar(client, "SELECT count(*) FROM push.delivery_stats")
                    _ = try await Self.scalar(client, "SELECT count(*) FROM push.queue_backlog")
                }
                let remaining = repointed + .seconds(20) - ContinuousClock.now
                if remaining > .zero { try await Task.sleep(for: remaining) }
                #expect(try await MetricsEndpointTests.get(port, "/readyz").0 == 503, "still not ready after 20 s on a standby")

                try bouncer.repoint(to: primary.port)
                ready = 503
                let back = ContinuousClock.now
                while ready != 200, ContinuousClock.now < back + .seconds(30) {
                    try await Task.sleep(for: .milliseconds(200))
                    ready = (try? await MetricsEndpointTests.get(port, "/readyz").0) ?? 0
                }
                #expect(ready == 200, "ready again once the address points at the primary")
                #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 8000)
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 8000)
                #expect(Set(fleet.simulator.ledger.entries.map(\.token)).count == 8000)

                let lines = worker.log.split(separator: "\n").filter { $0.contains("database unavailable") }
                #expect(lines.contains { $0.contains("read-only") }, "the log says why: \(worker.log.suffix(2000))")
                // One line per problem, then at most one every 5 s: about 4 over 20 s, not one per failed call.
                #expect(lines.count >= 1 && lines.count <= 8, "\(lines.count) lines: \(lines.map { $0.prefix(400) })")
                #expect(worker.log.contains("database available again"))
                worker.signal(SIGTERM)
                #expect(await worker.waitForExit(timeout: .seconds(40)) == 0)
            }
        }

        /// A primary with a fleet's database (an app and `devices` devices, APNs answering in 300 ms), its
        /// streaming standby, and PgBouncer in transaction pooling in front of the primary.
        static func withStandbyBehindPgBouncer(
            devices: Int,
            _ body: @Sendable (Fleet, ThrowawayPostgres, ThrowawayPostgres, ThrowawayPgBouncer) async throws -> Void
        ) async throws {
            let primary = try ThrowawayPostgres.start()
            defer { primary.stop() }
            try await Fleet.with(cluster: try DatabaseURL(primary.url), configure: { $0.faults.latency = .fixed(.milliseconds(300)) }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(devices)
                let standby = try primary.makeStandby()
                defer { standby.stop() }
                let bouncer = try ThrowawayPgBouncer.start(targetPort: primary.port, databases: [fleet.db.name])
                defer { bouncer.stop() }
                try await body(fleet, primary, standby, bouncer)
            }
        }

        static func scalar(_ client: PostgresClient, _ sql: String) async throws -> Int64 {
            let rows = try await client.query(PostgresQuery(unsafeSQL: sql)).collect()
            return try rows[0].decode(Int64.self)
        }

        static func scalarText(_ client: PostgresClient, _ sql: String) async throws -> String {
            let rows = try await client.query(PostgresQuery(unsafeSQL: sql)).collect()
            return try rows[0].decode(String.self)
        }
    }
}
