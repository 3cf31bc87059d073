import Foundation
import PGPushCLISupport

/// One `pgpush worker` child process (the running executable itself), its log captured to a file.
///
/// The worker logs JSON lines (`--log-format json`), so the `worker stopped` line with its `tokens_sent` and
/// `statements` can be read back after it exits.
final class WorkerProcess: @unchecked Sendable {
    /// What a stopped worker reported.
    struct Report: Sendable {
        var id: String
        var exitStatus: Int32
        var tokensSent: Int?
        var statements: Int?
        var peakRSSKilobytes: Int?
        /// User + system CPU time right before the SIGTERM of ``WorkerProcess/stop(timeout:)``, so the drain and
        /// exit are not counted.
        var cpuSeconds: Double?

        var json: [String: Any] {
            ["id": id, "exit_status": exitStatus, "tokens_sent": jsonValue(tokensSent), "statements": jsonValue(statements),
             "peak_rss_kb": jsonValue(peakRSSKilobytes), "cpu_seconds": jsonValue(cpuSeconds)]
        }
    }

    let id: String
    let logPath: String
    private let process = Process()
    private var peakRSS: Int?
    private var lastCPUSeconds: Double?
    private var signalled = false

    /// Starts `<this executable> worker <arguments>`; its standard output and error go to `logPath`.
    init(id: String, arguments: [String], logPath: String) throws {
        self.id = id
        self.logPath = logPath
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Self.executablePath)
        process.arguments = ["worker", "--worker-id", id, "--log-format", "json", "--log-level", "info"] + arguments
        var environment = ProcessInfo.processInfo.environment
        // Flags decide; a stray PGPUSH_* variable of the caller's shell must not change the measured worker.
        for key in environment.keys where key.hasPrefix("PGPUSH_") || key == "DATABASE_URL" { environment[key] = nil }
        process.environment = environment
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
        try? log.close()
    }

    /// This executable: `/proc/self/exe` on Linux, else the path it was started by.
    static var executablePath: String {
        if let resolved = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return resolved }
        return CommandLine.arguments[0]
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }

    /// The worker's peak resident set so far (`VmHWM` of `/proc/<pid>/status`), in kB; remembered for ``stop(timeout:)``.
    @discardableResult
    func samplePeakRSS() -> Int? {
        guard process.isRunning,
              let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") })
        else { return peakRSS }
        let value = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        if let value { peakRSS = max(peakRSS ?? 0, value) }
        return peakRSS
    }

    /// User + system CPU time the worker has used so far (`utime` + `stime`, fields 14 and 15 of
    /// `/proc/<pid>/stat`, in clock ticks); `nil` once it has exited or where there is no /proc. The last sample is
    /// what ``stop(timeout:)`` reports.
    @discardableResult
    func cpuSeconds() -> Double? {
        guard process.isRunning, let seconds = ProcessStat(pid: pid)?.cpuSeconds else { return nil }
        lastCPUSeconds = seconds
        return seconds
    }

    /// Samples memory and CPU, then sends SIGTERM (once): the worker drains and exits 0.
    func terminate() {
        samplePeakRSS()
        guard process.isRunning, !signalled else { return }
        cpuSeconds()
        signalled = true
        kill(pid, SIGTERM)
    }

    /// ``terminate()``, then SIGKILL if it outlives `timeout`; returns what it reported.
    func stop(timeout: Duration = .seconds(45)) async -> Report {
        terminate()
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline {
            // Sleeping in a detached way: cleanup runs even when the caller was cancelled.
            usleep(20_000)
        }
        if process.isRunning {
            kill(pid, SIGKILL)
        }
        process.waitUntilExit()
        var report = Report(
            id: id, exitStatus: process.terminationStatus, peakRSSKilobytes: peakRSS, cpuSeconds: lastCPUSeconds)
        if let stopped = Self.stoppedLine(in: logPath) {
            report.tokensSent = (stopped["tokens_sent"] as? String).flatMap { Int($0) }
            report.statements = (stopped["statements"] as? String).flatMap { Int($0) }
        }
        return report
    }

    /// The last `worker stopped` JSON object of a worker log.
    static func stoppedLine(in path: String) -> [String: Any]? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n").reversed() where line.contains("\"worker stopped\"") {
            if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] { return object }
        }
        return nil
    }

    /// The last lines of the worker's log, for error messages.
    func logTail(lines: Int = 4) -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(lines).map { $0.prefix(600) }.joined(separator: "\n")
    }
}
