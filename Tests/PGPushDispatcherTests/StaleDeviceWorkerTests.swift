import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

/// `pgpush worker --stale-device-days` end to end, and the job events a real worker's broadcast records.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(3)))
    struct StaleDeviceWorkerTests {
        @Test func aWorkerRemovesStaleDevicesAndItsBroadcastRecordsItsEvents() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(20, registeredDaysAgo: 29)
                try await fleet.registerDevices(5, prefix: "ee", registeredDaysAgo: 31)
                let worker = try fleet.startWorker([], environment: ["PGPUSH_STALE_DEVICE_DAYS": "30"])
                _ = try await fleet.waitUntil("SELECT count(*) FROM push.pruned_devices WHERE reason = 'Stale'") { $0 == 5 }
                #expect(try await fleet.count("SELECT count(*) FROM push.devices") == 20)
                #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE token LIKE 'ee%'") == 0)
                #expect(try await fleet.count("""
                    SELECT count(*) FROM push.job_events WHERE event = 'devices_pruned' AND body->'devices'->0->>'reason' = 'Stale'
                    """) == 1)

                let job = try await fleet.enqueue()
                #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "done")
                let events = try await fleet.db.exec("""
                    SELECT event, (body->>'delivered')::int8 FROM push.job_events WHERE job_id = \(job) ORDER BY id
                    """).map { try $0.decode((String, Int64).self) }
                #expect(events.map(\.0) == ["job_started", "job_done"])
                #expect(events.last?.1 == 20)
                await worker.stop()
            }
        }

        @Test func aStaleDeviceAgeThatIsNotPositiveIsRefused() throws {
            for value in ["0", "-5"] {
                let result = try Fleet.runPGPush(["worker", "--database-url", "postgres://nobody@127.0.0.1:1/none", "--stale-device-days", value])
                #expect(result.status == 64, "\(value): \(result.stderr)")
                #expect(result.stderr.contains("--stale-device-days must be a positive number of days"), "\(result.stderr)")
            }
        }
    }
}
