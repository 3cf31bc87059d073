import Foundation
import PGPushSimulator
import Testing

/// Drives the FCM simulator with nghttp2's h2load, an independent HTTP/2 client that respects
/// SETTINGS_MAX_CONCURRENT_STREAMS strictly once it has read it: with a limit below h2load's concurrency,
/// nothing is refused. (Before it has read the SETTINGS it may open up to 100 streams, as RFC 9113 allows;
/// the simulator accepts those.)
@Suite("FCM simulator: h2load", .network)
struct FCMSimulatorH2LoadTests {
    @Test(.timeLimit(.minutes(2)), .enabled(if: SimulatorH2LoadTests.runs, "h2load (Debian's nghttp2-client) is not installed"))
    func h2loadSendsWithinTheAdvertisedLimit() async throws {
        try await FCMSimulatorHarness.with(configure: { $0.maxConcurrentStreams = 8 }) { harness in
            let client = try await harness.connect()
            let accessToken = try await harness.accessToken(client)
            await client.close()

            let directory = NSTemporaryDirectory() + "pgpush-fcm-h2load-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let bodyPath = directory + "/body.json"
            try Data(FCMSimulatorHarness.body(token: FCMSimulatorHarness.token(1)).utf8).write(to: URL(fileURLWithPath: bodyPath))

            let requests = 1000
            let process = Process()
            process.executableURL = URL(fileURLWithPath: SimulatorH2LoadTests.h2load)
            process.arguments = [
                "-c", "2", "-m", "32", "-n", "\(requests)", "-d", bodyPath,
                "-H", "authorization: Bearer \(accessToken)", "-H", "content-type: application/json",
                "https://127.0.0.1:\(harness.port)/v1/projects/\(FCMSimulatorHarness.projectID)/messages:send",
            ]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            let text = String(decoding: data, as: UTF8.self)

            #expect(process.terminationStatus == 0)
            #expect(text.contains("\(requests) succeeded"), "\(text)")
            #expect(text.contains("status codes: \(requests) 2xx"), "\(text)")
            #expect(harness.simulator.ledger.acceptedCount == requests)
            let statistics = harness.simulator.statistics
            #expect(statistics.streamLimitViolations == 0)
            #expect(statistics.maximumConcurrentStreamsObserved > 1)
            #expect(statistics.maximumConcurrentStreamsObserved <= 32)
        }
    }
}
