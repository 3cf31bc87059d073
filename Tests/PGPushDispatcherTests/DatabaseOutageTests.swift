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
            try await Fleet.with(cluster: try DatabaseURL(cluster.url)) { fleet in
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
                #expect(worker.log.contains("writing results failed") || worker.log.contains("claim failed"),
                        "the outage was not noticed")
            }
        }
    }
}
