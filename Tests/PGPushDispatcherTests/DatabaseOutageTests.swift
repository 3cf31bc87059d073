import Foundation
import PGPushDevelopment
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct DatabaseOutageTests {
        /// PostgreSQL stopped for 10 s mid-broadcast, then started again: the worker keeps its results, claims
        /// nothing while it cannot write, and the broadcast completes with nothing lost or sent twice.
        @Test func aTenSecondOutageLosesNothing() async throws {
            let cluster = try ThrowawayPostgres.start()
            defer { cluster.stop() }
            // APNs answering in 500 ms caps sending at a few thousand per second, so the outage lands while
            // most of the broadcast is still unsent however fast the worker is.
            try await Fleet.with(cluster: try DatabaseURL(cluster.url), configure: { $0.faults.latency = .fixed(.milliseconds(500)) }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(20_000)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker()
                let deadline = ContinuousClock.now + .seconds(60)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 4000, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                try cluster.stopServer()
                try await Task.sleep(for: .seconds(10))
                try cluster.startServer()

                #expect(try await fleet.waitForJob(job, timeout: .seconds(200)) == "done", "\(worker.log.suffix(1500))")
                await worker.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 20_000)
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 20_000)
                #expect(fleet.simulator.ledger.acceptedCount == 20_000)
                #expect(fleet.simulator.ledger.duplicates.count == 0)
                // Which call meets the outage depends on timing: a query in flight fails at once, one waiting
                // for a connection sees the reconnects fail. Either proves the worker ran through it.
                let noticed = ["database unavailable", "writing results failed", "claim failed", "Connection creation failed"]
                #expect(noticed.contains { worker.log.contains($0) }, "the outage was not noticed: \(worker.log.suffix(3000))")
            }
        }

        /// PostgreSQL goes away mid-broadcast and stays away: `/healthz` turns 503, and SIGTERM still ends the
        /// worker within the grace period plus a few seconds, exit code 0, with what it could not write logged as
        /// counts. Once the database is back, the leases make the rest safe: every token gets one outcome.
        @Test func whileTheDatabaseIsDownHealthzFailsAndSIGTERMStillExitsInTime() async throws {
            let cluster = try ThrowawayPostgres.start()
            defer { cluster.stop() }
            try await Fleet.with(cluster: try DatabaseURL(cluster.url), configure: { $0.faults.latency = .fixed(.milliseconds(300)) }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(6000)
                let job = try await fleet.enqueue()
                let port = try freeLoopbackPort()
                let flags = ["--lease", "6", "--heartbeat-interval", "1", "--grace-period", "4"]
                let worker = try fleet.startWorker(flags + ["--metrics-port=\(port)", "--metrics-host", "127.0.0.1"])
                let deadline = ContinuousClock.now + .seconds(60)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 1000, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(try await MetricsEndpointTests.get(port, "/healthz").0 == 200)
                try cluster.stopServer()

                // The database window is the lease (6 s) here.
                var health = 200
                let unhealthyBy = ContinuousClock.now + .seconds(20)
                while health == 200, ContinuousClock.now < unhealthyBy {
                    try await Task.sleep(for: .milliseconds(250))
                    health = (try? await MetricsEndpointTests.get(port, "/healthz").0) ?? 0
                }
                #expect(health == 503, "/healthz with the database down")

                let signalled = ContinuousClock.now
                worker.signal(SIGTERM)
                let status = await worker.waitForExit(timeout: .seconds(30))
                let took = ContinuousClock.now - signalled
                #expect(status == 0, "exit status \(status.map(String.init) ?? "none: killed"): \(worker.log.suffix(2000))")
                #expect(took < .seconds(4 + 8), "SIGTERM took \(took) with a 4 s grace period")
                #expect(!worker.log.contains("Fatal error"))
                #expect(worker.log.contains("results could not be written within the grace period"), "\(worker.log.suffix(2000))")

                try cluster.startServer()
                let rescuer = try fleet.startWorker(flags)
                #expect(try await fleet.waitForJob(job, timeout: .seconds(200)) == "done", "\(rescuer.log.suffix(1500))")
                await rescuer.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 6000)
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 6000)
            }
        }
    }
}
