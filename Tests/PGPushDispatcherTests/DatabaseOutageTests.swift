import Foundation
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
                let noticed = ["writing results failed", "claim failed", "Connection creation failed"]
                #expect(noticed.contains { worker.log.contains($0) }, "the outage was not noticed: \(worker.log.suffix(3000))")
            }
        }
    }
}
