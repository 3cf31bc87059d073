import Foundation
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

extension EndToEndTests {
    /// push.resend_failed after a real run: the tokens a worker recorded as failed, and only those, get the resend.
    @Suite(.timeLimit(.minutes(4)))
    struct ResendFailedTests {
        @Test func aResendReachesExactlyTheTokensThatFailedWithoutRetries() async throws {
            try await Fleet.with(configure: { $0.faults.serverErrorRate = 0.05 }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(2000)
                // No retries: every 500 or 503 is the token's final outcome.
                let worker = try fleet.startWorker(["--max-attempts", "1"])
                let job = try await fleet.enqueue(", labels => '{\"campaign\": \"launch\"}'")
                #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                let failed = try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status IN (500, 503)")
                #expect(failed > 40 && failed < 200, "5 % of 2,000 answered 500 or 503: \(failed)")
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 2000 - failed)

                // The simulator's faults are drawn per token and attempt: the resend's first attempts fail for
                // other tokens, so switch them off to see every resent token arrive.
                fleet.simulator.updateFaults { $0.serverErrorRate = 0 }
                fleet.simulator.ledger.reset()
                let resend = try await fleet.db.scalar("SELECT push.resend_failed(\(job))")
                #expect(try await fleet.waitForJob(resend, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                await worker.stop()

                let resent = Set(fleet.simulator.ledger.entries.map(\.token))
                var expected = Set<String>()
                let rows = try await fleet.db.rows("SELECT token FROM push.deliveries WHERE job_id = \(job) AND status <> 200")
                for try await token in rows.decode(String.self) { expected.insert(token) }
                #expect(resent == expected)
                #expect(resent.count == Int(failed))
                #expect(fleet.simulator.ledger.duplicates.isEmpty)
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(resend) AND resent_from = \(job) AND labels = '{\"campaign\": \"launch\"}'") == 1)
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(resend)") == failed)
            }
        }
    }
}
