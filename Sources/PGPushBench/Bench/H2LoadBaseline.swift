import ArgumentParser
import Foundation
import PGPushCLISupport
import PGPushCore
import PGPushDevelopment

/// h2load (nghttp2's HTTP/2 load generator, written in C) against the endpoint a bench sends to, in the same
/// run: the figure a bench's rate is divided by, so the ratio does not depend on how fast the machine is today.
///
/// It sends APNs requests with the same headers and body the workers send, to one device path, with
/// `connections` connections of `streams` concurrent streams each (the issue's `-c4 -m100`).
struct H2LoadBaseline: Sendable {
    var requests: Int
    var connections = 4
    var streams = 100
    /// h2load is stopped after this long, whatever it has done.
    var timeout: Duration = .seconds(300)

    /// What h2load measured.
    struct Result: Sendable {
        var requestsPerSecond: Double
        var succeeded: Int
        var requests: Int
        var connections: Int
        var streams: Int
        /// h2load's own CPU time (user + system) for the run; 0 where it could not be read.
        var cpuSeconds: Double = 0

        /// h2load's CPU per request, beside a bench's CPU per token; `nil` when none was read.
        var cpuMicrosecondsPerRequest: Double? {
            guard cpuSeconds > 0, requests > 0 else { return nil }
            return cpuSeconds * 1e6 / Double(requests)
        }

        var json: [String: Any] {
            ["requests_per_second": requestsPerSecond, "succeeded": succeeded, "requests": requests,
             "connections": connections, "streams": streams,
             "cpu_us_per_request": jsonValue(cpuMicrosecondsPerRequest)]
        }

        /// `-c4 -m100, 200000 requests`.
        var label: String { "-c\(connections) -m\(streams), \(requests) requests" }
    }

    static var executable: String? {
        ["/usr/bin/h2load", "/usr/local/bin/h2load"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Fails at once, before a rig is built, when h2load is missing.
    static func checkInstalled() throws {
        guard executable != nil else { throw ValidationError("--h2load needs h2load: apt-get install nghttp2-client") }
    }

    /// Runs h2load: `POST <endpoint>/3/device/<token>` with the APNs headers, a provider token from `signer`,
    /// and `body`.
    func run(endpoint: String, signer: ProviderTokenSigner, topic: String, pushType: String, body: String) async throws -> Result {
        guard let executable = Self.executable else { throw PGPushError(.invalidConfiguration, "h2load is not installed: apt-get install nghttp2-client") }
        let directory = try makeTemporaryDirectory(prefix: "pgpush-h2load-")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bodyPath = "\(directory)/body.json"
        try Data(body.utf8).write(to: URL(fileURLWithPath: bodyPath))
        let token = String(repeating: "ab", count: 32)
        let arguments = [
            "-c", String(connections), "-m", String(streams), "-n", String(requests), "-d", bodyPath,
            "-H", "apns-topic: \(topic)", "-H", "apns-push-type: \(pushType)",
            "-H", "authorization: bearer \(try signer.sign(issuedAt: Date()).jwt)",
            "\(endpoint)/3/device/\(token)",
        ]

        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        let childrenCPUBefore = ProcessCPUTime.reapedChildrenSeconds()
        try process.run()
        // A child task drains the pipe (a full pipe would stall h2load) while this one polls the deadline.
        async let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if ContinuousClock.now >= deadline {
                process.terminate()
                break
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        process.waitUntilExit()
        let text = String(decoding: await outputData, as: UTF8.self)
        // The rigs start no other child that ends while h2load runs, so the change is h2load's alone.
        let cpuSeconds = ProcessCPUTime.reapedChildrenSeconds() - childrenCPUBefore
        guard process.terminationStatus == 0, var result = Self.parse(text, requests: requests, connections: connections, streams: streams) else {
            throw PGPushError(.invalidConfiguration, "h2load failed (exit \(process.terminationStatus)):\n\(text.suffix(1500))")
        }
        result.cpuSeconds = cpuSeconds
        return result
    }

    /// Reads `finished in 3.52s, 56818.18 req/s, …` and `requests: … 200000 succeeded, …` from h2load's output.
    static func parse(_ text: String, requests: Int, connections: Int, streams: Int) -> Result? {
        func number(before suffix: String) -> Double? {
            guard let range = text.range(of: suffix) else { return nil }
            let digits = text[..<range.lowerBound].reversed().prefix { $0.isNumber || $0 == "." }
            return Double(String(digits.reversed()))
        }
        guard let rate = number(before: " req/s"), let succeeded = number(before: " succeeded") else { return nil }
        return Result(requestsPerSecond: rate, succeeded: Int(succeeded), requests: requests, connections: connections, streams: streams)
    }
}
