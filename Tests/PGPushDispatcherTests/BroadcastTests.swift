import Foundation
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// End to end: real PostgreSQL, the simulator over TLS HTTP/2, and `pgpush worker` processes.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct BroadcastTests {
        /// Every token has exactly one final delivery row, and the ledger one accepted request per live token.
        /// `alsoAccepted`: other jobs' notifications the simulator accepted in the same run.
        static func expectExactlyOnce(_ fleet: Fleet, job: Int64, tokens: Int64, alsoAccepted: Int = 0) async throws {
            #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == tokens)
            #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == tokens)
            #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == tokens)
            #expect(fleet.simulator.ledger.acceptedCount == Int(tokens) + alsoAccepted)
            #expect(fleet.simulator.ledger.duplicates.count == 0)
            #expect(fleet.simulator.statistics.streamLimitViolations == 0)
        }

        @Test func oneWorkerSendsATwentyThousandTokenBroadcastExactlyOnce() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(20_000)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker()
                let state = try await fleet.waitForJob(job, timeout: .seconds(200))
                #expect(state == "done", "\(worker.log.suffix(1500))")
                await worker.stop()
                try await Self.expectExactlyOnce(fleet, job: job, tokens: 20_000)
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks") == 0)
                // apns-id is the deterministic UUIDv5 of (job, token), so duplicates could be traced.
                #expect(try await fleet.count("SELECT count(DISTINCT apns_id) FROM push.deliveries WHERE job_id = \(job)") == 20_000)
            }
        }

        @Test func threeWorkersShareABroadcastWhileSmallUrgentJobsFinishFirst() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(30_000)
                let broadcast = try await fleet.enqueue()
                let workers = try (0..<3).map { try fleet.startWorker(["--chunk-size", "500"], id: "share-\($0)") }
                // Once the broadcast is under way, 100 one-token jobs of higher priority arrive.
                let deadline = ContinuousClock.now + .seconds(60)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(broadcast)") < 3000, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(100))
                }
                var small: [Int64] = []
                for index in 0..<100 {
                    let token = "cafe" + String(format: "%060x", index)
                    small.append(try await fleet.enqueue(", tokens => ARRAY['\(token)'], priority => 10"))
                }
                #expect(try await fleet.waitForJob(broadcast, timeout: .seconds(240)) == "done")
                for job in small {
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(10)) == "done")
                }
                let smallIDs = small.map(String.init).joined(separator: ",")
                let finishedBeforeBroadcast = try await fleet.count(PostgresQuery(unsafeSQL: """
                    SELECT count(*) FROM push.jobs s, push.jobs b
                     WHERE s.id IN (\(smallIDs)) AND b.id = \(broadcast) AND s.finished_at < b.finished_at
                    """))
                #expect(finishedBeforeBroadcast == 100)
                for worker in workers { await worker.stop() }

                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries") == 30_100)
                #expect(fleet.simulator.ledger.acceptedCount == 30_100)
                #expect(fleet.simulator.ledger.duplicates.count == 0)
                // Every worker sent a share: each logged a non-zero tokens_sent when it stopped.
                for worker in workers {
                    let sent = Self.tokensSent(in: worker.log)
                    #expect((sent ?? 0) > 0, "a worker sent nothing: \(worker.log.suffix(500))")
                }
            }
        }

        @Test func faultsStillEndEveryTokenDeliveredOrFailedWithAReason() async throws {
            try await Fleet.with(configure: { configuration in
                configuration.faults.seed = 42
                configuration.faults.serverErrorRate = 0.05
                configuration.faults.tooManyRequestsTokenFraction = 0.01
                configuration.faults.tooManyRequestsFirstAttempts = 2
                configuration.faults.goAwayEveryStreams = 5000
                configuration.faults.resetEveryStreams = 20_000
            }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(25_000)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker(["--retry-base-delay", "0.05", "--retry-max-delay", "0.5"])
                #expect(try await fleet.waitForJob(job, timeout: .seconds(240)) == "done")
                await worker.stop()
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 25_000)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 25_000)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status <> 200 AND reason IS NULL") == 0)
                // The faults really happened, and the retries got past them.
                let statistics = fleet.simulator.statistics
                #expect(statistics.goAwaysSent >= 1)
                #expect(statistics.resets >= 1)
                #expect(statistics.count(status: 429) > 0)
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") > 24_000)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND attempt > 1") > 0)
            }
        }

        @Test func aKilledWorkersChunksAreRescuedAndEveryTokenAccountedFor() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(30_000)
                let job = try await fleet.enqueue()
                let leaseArguments = ["--lease", "3", "--heartbeat-interval", "1"]
                let victim = try fleet.startWorker(leaseArguments, id: "victim")
                let deadline = ContinuousClock.now + .seconds(60)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 6000, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                victim.signal(SIGKILL)
                _ = await victim.waitForExit(timeout: .seconds(5))
                let rescuer = try fleet.startWorker(leaseArguments, id: "rescuer")
                #expect(try await fleet.waitForJob(job, timeout: .seconds(200)) == "done")
                await rescuer.stop()

                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 30_000)
                #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 30_000)
                // Re-sent tokens are the killed worker's in-flight window at most: its claimed chunks.
                let duplicates = fleet.simulator.ledger.duplicates.count
                print("kill -9: \(duplicates) tokens were sent twice (window: 4 chunks of 1000)")
                #expect(duplicates <= 4 * 1000)
                #expect(fleet.simulator.ledger.acceptedCount == 30_000 + duplicates)
            }
        }

        @Test func sigtermDrainsWithinTheGracePeriodAndLosesNothing() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(30_000)
                let job = try await fleet.enqueue()
                let first = try fleet.startWorker(["--grace-period", "10"], id: "first")
                let deadline = ContinuousClock.now + .seconds(60)
                while try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") < 5000, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                let signalled = ContinuousClock.now
                first.signal(SIGTERM)
                let status = await first.waitForExit(timeout: .seconds(15))
                #expect(status == 0, "worker did not exit 0 after SIGTERM: \(first.log.suffix(800))")
                #expect(ContinuousClock.now - signalled < .seconds(12))
                // Nothing is left locked by the stopped worker: unsent tokens went back to the queue.
                #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE locked_by LIKE 'first#%'") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.workers WHERE id = 'first'") == 0)

                let second = try fleet.startWorker(id: "second")
                #expect(try await fleet.waitForJob(job, timeout: .seconds(200)) == "done")
                await second.stop()
                try await Self.expectExactlyOnce(fleet, job: job, tokens: 30_000)
            }
        }

        static func tokensSent(in log: String) -> Int? {
            for line in log.split(separator: "\n").reversed() where line.contains("worker stopped") {
                guard let data = line.data(using: .utf8),
                      let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                      let sent = object["tokens_sent"] as? String
                else { continue }
                return Int(sent)
            }
            return nil
        }
    }
}
