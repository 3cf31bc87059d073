import Foundation
import PGPushSimulator
import Testing

/// Drives the simulator with nghttp2's h2load, an independent HTTP/2 client that respects SETTINGS strictly.
@Suite("APNs simulator: h2load", .network)
struct SimulatorH2LoadTests {
    static let h2load = "/usr/bin/h2load"
    /// `scripts/test` installs h2load and sets PGPUSH_REQUIRE_H2LOAD, so there a missing h2load fails the test
    /// instead of skipping it; a bare `swift test` without h2load skips it.
    static let runs = FileManager.default.isExecutableFile(atPath: h2load)
        || ProcessInfo.processInfo.environment["PGPUSH_REQUIRE_H2LOAD"] != nil

    @Test(.timeLimit(.minutes(2)), .enabled(if: runs, "h2load (Debian's nghttp2-client) is not installed"))
    func h2loadRequestsAllSucceedWithinTheStreamLimits() async throws {
        try await SimulatorHarness.with { harness in
            let directory = NSTemporaryDirectory() + "pgpush-h2load-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let bodyPath = directory + "/body.json"
            try Data(SimulatorHarness.payload.utf8).write(to: URL(fileURLWithPath: bodyPath))

            let requests = 2000
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Self.h2load)
            process.arguments = [
                "-c", "2", "-m", "20", "-n", "\(requests)", "-d", bodyPath,
                "-H", "authorization: bearer \(harness.jwt)", "-H", "apns-topic: \(SimulatorHarness.topic)",
                "-H", "apns-push-type: alert",
                "https://127.0.0.1:\(harness.port)/3/device/\(SimulatorHarness.token(9))",
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
            #expect(statistics.maximumConcurrentStreamsObserved <= 20)
        }
    }
}
