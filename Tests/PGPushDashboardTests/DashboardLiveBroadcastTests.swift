import Crypto
import Foundation
import Logging
import PGPushDashboard
import PGPushDispatcher
import PGPushSimulator
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import ServiceLifecycle
import Testing

/// The dashboard beside a real broadcast: a worker (in this process) sends 2,000 notifications to the APNs
/// simulator over TLS, answered after 20 ms and held to a few in flight so that the broadcast lasts a few
/// seconds, while headless Chromium reads the overview; then the job page shows what the worker recorded.
@Suite(.database, .timeLimit(.minutes(3)))
struct DashboardLiveBroadcastTests {
    static let devices = 2000

    /// The total the overview's chart reports: "Sends per minute over the last hour: N in all".
    static func sendsInAll(_ page: String) -> Int? {
        guard let range = page.range(of: "Sends per minute over the last hour: ") else { return nil }
        let digits = page[range.upperBound...].prefix { $0.isNumber || $0 == "," }.filter(\.isNumber)
        return Int(digits)
    }

    @Test func theOverviewFollowsARunningBroadcastAndTheJobPageShowsItsOutcome() async throws {
        try await TestDatabase.with { db in
            var quiet = Logger(label: "pgpush.test.dashboard-live")
            quiet.logLevel = .warning
            let directory = NSTemporaryDirectory() + "pgpush-dashboard-live-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let key = P256.Signing.PrivateKey()
            let keyPath = directory + "/AuthKey.p8"
            try key.pemRepresentation.write(toFile: keyPath, atomically: true, encoding: .utf8)

            var simulatorConfiguration = APNsSimulatorConfiguration()
            simulatorConfiguration.certificateDirectory = directory + "/simulator"
            simulatorConfiguration.tokenKeys = [SimulatorTokenKey(teamID: "TEAM123456", keyID: "KEY1234567", publicKey: key.publicKey)]
            simulatorConfiguration.faults.latency = .fixed(.milliseconds(20))
            let simulator = APNsSimulator(configuration: simulatorConfiguration, logger: quiet)
            let port = try await simulator.start()
            defer { Task { await simulator.shutdown() } }

            try await db.execute("""
                INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path)
                VALUES ('live', 'com.example.live', 'TEAM123456', 'KEY1234567', \(keyPath))
                """)
            try await db.execute("""
                INSERT INTO push.devices (app_id, token) SELECT 'live', lpad(to_hex(g), 64, '0') FROM generate_series(1, \(Self.devices)) g
                """)

            var configuration = WorkerConfiguration()
            configuration.workerID = "dashboard-live"
            configuration.apnsEndpointOverride = "https://localhost:\(port)"
            configuration.apnsCAFile = simulator.caCertificatePath
            configuration.chunkSize = 100
            // About 500 answers a second: the broadcast lasts seconds, long enough to be seen under way.
            configuration.requestsInFlightPerApp = 10
            configuration.maximumInFlight = 20
            let workerClient = PostgresClient(configuration: try db.url.clientConfiguration(maximumConnections: 4), backgroundLogger: quiet)
            let worker = Worker(configuration: configuration, client: workerClient, listener: workerClient, logger: quiet)
            let group = ServiceGroup(configuration: .init(
                services: [.init(service: workerClient), .init(service: worker, successTerminationBehavior: .gracefullyShutdownGroup)],
                logger: quiet))

            try await DashboardHarness.with(DashboardHarness.configuration(), client: db.client, logger: db.logger) { dashboard in
                #expect(Self.sendsInAll(try await Browser.dumpDOM(dashboard.base + "/")) == 0)
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask { try await simulator.run() }
                    tasks.addTask { try await group.run() }
                    let job = try await db.scalar(Int64.self, #"SELECT push.enqueue('live', '{"aps":{"alert":"live"}}')"#)

                    // Under way: the overview shows some of the sends, and the job still runs when it has been read.
                    let deadline = ContinuousClock.now + .seconds(60)
                    while try await db.scalar(Int64.self, "SELECT delivered FROM push.jobs WHERE id = \(job)") < 200 {
                        guard ContinuousClock.now < deadline else { throw DashboardHarness.HarnessFailure("the broadcast did not start") }
                        try await Task.sleep(for: .milliseconds(50))
                    }
                    let underWay = Self.sendsInAll(try await Browser.dumpDOM(dashboard.base + "/")) ?? -1
                    let stillRunning = try await db.strings("SELECT state FROM push.jobs WHERE id = \(job)") == ["running"]
                    #expect(underWay >= 200, "the overview shows the sends so far: \(underWay)")
                    #expect(stillRunning && underWay < Self.devices, "read mid-broadcast: \(underWay) sends shown")

                    while try await db.strings("SELECT state FROM push.jobs WHERE id = \(job)") != ["done"] {
                        guard ContinuousClock.now < deadline else { throw DashboardHarness.HarnessFailure("the broadcast did not finish") }
                        try await Task.sleep(for: .milliseconds(100))
                    }
                    try await Task.sleep(for: .milliseconds(250))  // past the overview's shared snapshot
                    let done = Self.sendsInAll(try await Browser.dumpDOM(dashboard.base + "/"))
                    #expect(done == Self.devices, "the overview follows the broadcast to its end")
                    #expect(simulator.ledger.acceptedCount == Self.devices)

                    let jobPage = try await Browser.dumpDOM(dashboard.base + "/jobs/\(job)")
                    let platforms = try #require(jobPage.element(id: "table-platforms", tag: "table"))
                    #expect(platforms.contains("<td>ios</td><td class=\"num\">2,000</td><td class=\"num\">2,000</td>"), "\(platforms)")
                    await group.triggerGracefulShutdown()
                    tasks.cancelAll()
                }
            }
        }
    }
}
