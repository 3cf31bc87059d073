import Foundation
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// A worker killed in the middle of a mixed-platform broadcast and restarted under its id, and a cancel while a
/// dead worker holds Android chunks: the APNs cases of RealOperationTests, with FCM traffic in flight.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct FCMRealOperationTests {
        @Test func aWorkerKilledInAMixedBroadcastAndRestartedUnderItsIdFinishesBothPlatforms() async throws {
            try await Fleet.with(configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { fleet in
                try await AndroidSide.with(fleet, configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { android in
                    try await android.createDualApp(fleet)
                    try await fleet.registerDevices(3000)
                    try await android.registerDevices(fleet, 3000)
                    let job = try await fleet.enqueue()
                    let flags = ["--lease", "5", "--heartbeat-interval", "1"] + android.workerArguments
                    let first = try fleet.startWorker(flags, id: "pod-0")
                    try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(90)) {
                        try await fleet.count("SELECT android_delivered FROM push.jobs WHERE id = \(job)") >= 300
                    }
                    #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE locked_by IS NOT NULL") > 0)
                    first.signal(SIGKILL)
                    _ = await first.waitForExit(timeout: .seconds(10))
                    let second = try fleet.startWorker(flags, id: "pod-0")
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(65)) == "done", "\(second.log.suffix(1500))")
                    await second.stop()

                    // One outcome per token on each platform, and the counters agree with them.
                    #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 6000)
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 6000)
                    #expect(try await fleet.count("""
                        SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND platform = 'android' AND status = 200
                        """) == 3000)
                    #expect(try await FCMDeliveryTests.platformProgress(fleet, job: job) == [3000, 3000, 0, 0, 3000, 3000, 0, 0])
                    // Every Android device reached FCM; none reached APNs.
                    #expect(Set(android.simulator.ledger.entries.map(\.token)).count == 3000)
                    #expect(fleet.simulator.ledger.entries.allSatisfy { !$0.token.hasPrefix("fcm-") })
                }
            }
        }

        @Test func aCancelWhileADeadWorkerHoldsAndroidChunksSendsNothingMoreToFCM() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet, configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { android in
                    try await android.createDualApp(fleet)
                    try await android.registerDevices(fleet, 10_000)
                    let job = try await fleet.enqueue()
                    let flags = ["--lease", "3", "--heartbeat-interval", "1"] + android.workerArguments
                    let crashed = try fleet.startWorker(flags, id: "crashed")
                    try await SchedulingTests.waitUntilDelivered(fleet, job: job, atLeast: 500)
                    crashed.signal(SIGKILL)
                    _ = await crashed.waitForExit(timeout: .seconds(10))
                    // What the dead worker had in flight still gets its (delayed) answer; that is not "after".
                    try await Task.sleep(for: .milliseconds(500))
                    #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE locked_by IS NOT NULL") > 0, "the dead worker held chunks")
                    #expect(try await fleet.count("SELECT push.cancel(\(job))::int::int8") == 1)
                    let acceptedAtCancel = android.simulator.ledger.acceptedCount
                    let rescuer = try fleet.startWorker(flags, id: "rescuer")
                    // Past the dead worker's lease, maintenance drops the chunks; with none left nothing can be sent.
                    try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                        try await fleet.count("SELECT count(*) FROM push.chunks WHERE job_id = \(job)") == 0
                    }
                    #expect(android.simulator.ledger.acceptedCount == acceptedAtCancel, "FCM sends after the cancel")
                    #expect(try await fleet.count("SELECT count(*) FROM push.chunks WHERE job_id = \(job)") == 0)
                    #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'cancelled'") == 1)
                    await rescuer.stop()
                    let recorded = try await fleet.count("""
                        SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND platform = 'android' AND status = 200
                        """)
                    #expect(try await fleet.count("SELECT android_delivered FROM push.jobs WHERE id = \(job)") == recorded)
                    #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == recorded)
                    let progress = try await FCMDeliveryTests.platformProgress(fleet, job: job)
                    #expect(progress.last == 0, "a cancelled job has nothing pending")
                }
            }
        }
    }
}
