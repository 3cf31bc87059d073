import Foundation
import Testing

/// What one run of the `pgpush` binary produced.
struct CLIResult: Sendable, CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    /// Standard output parsed as one JSON value.
    func json() throws -> Any {
        try JSONSerialization.jsonObject(with: Data(stdout.utf8))
    }

    /// Standard output parsed as JSON lines (one object per line).
    func jsonLines() throws -> [[String: Any]] {
        try stdout.split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not an object: \(line)")
        }
    }

    var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

/// Runs the `pgpush` executable that `swift build --product pgpush` left in `.build/debug`, as a child process.
///
/// Output goes to temporary files rather than pipes, so a chatty child can never block on a full pipe.
final class CLIProcess: @unchecked Sendable {
    /// The package root, three levels above this file (`Tests/PGPushCLITests/<file>`).
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let binary = packageRoot.appendingPathComponent(".build/debug/pgpush")

    private let process = Process()
    private let directory: URL
    private let stdoutURL: URL
    private let stderrURL: URL

    /// Starts `pgpush arguments…` with `stdin` as its standard input (empty when nil).
    init(_ arguments: [String], stdin: Data? = nil, environment: [String: String] = [:]) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary.path) else {
            throw CLITestError("missing \(Self.binary.path): run `swift build --product pgpush` first")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        stdoutURL = directory.appendingPathComponent("stdout")
        stderrURL = directory.appendingPathComponent("stderr")
        let stdinURL = directory.appendingPathComponent("stdin")
        for url in [stdoutURL, stderrURL, stdinURL] {
            _ = FileManager.default.createFile(atPath: url.path, contents: nil)
        }
        try (stdin ?? Data()).write(to: stdinURL)
        process.executableURL = Self.binary
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        // The child must only see the database the test passes explicitly.
        for key in ["DATABASE_URL", "PGPUSH_LOG_FORMAT", "PGPUSH_LOG_LEVEL"] { env[key] = nil }
        env["PGPUSH_LOG_LEVEL"] = "warning"
        process.environment = env.merging(environment) { $1 }
        process.standardInput = try FileHandle(forReadingFrom: stdinURL)
        process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        try process.run()
    }

    /// Output so far (the child flushes progress lines as it goes).
    var stdoutSoFar: String {
        (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? ""
    }

    /// Waits for the child to exit; kills it and throws if it outlives `timeout`.
    func finish(timeout: Duration = .seconds(60)) async throws -> CLIResult {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if ContinuousClock.now >= deadline {
                process.terminate()
                process.waitUntilExit()
                throw CLITestError("pgpush \(process.arguments ?? []) still running after \(timeout); output: \(stdoutSoFar)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.waitUntilExit()
        defer { try? FileManager.default.removeItem(at: directory) }
        return CLIResult(
            status: process.terminationStatus,
            stdout: try String(contentsOf: stdoutURL, encoding: .utf8),
            stderr: try String(contentsOf: stderrURL, encoding: .utf8))
    }

    /// Runs `pgpush arguments…` to completion.
    static func run(
        _ arguments: [String], stdin: Data? = nil, timeout: Duration = .seconds(60)
    ) async throws -> CLIResult {
        try await CLIProcess(arguments, stdin: stdin).finish(timeout: timeout)
    }
}

struct CLITestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A temporary file with `contents`, removed by the caller's `defer`.
func temporaryFile(_ contents: String, suffix: String) throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-test-\(UUID().uuidString)\(suffix)")
    try Data(contents.utf8).write(to: url)
    return url
}

/// Polls `condition` every 20 ms until it holds, for at most `timeout`.
func eventually(
    timeout: Duration = .seconds(20), _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw CLITestError("condition not met within \(timeout)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}
