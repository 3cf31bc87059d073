import Foundation

/// A process that keeps one core busy beside a bench, as another service on a shared host would: a shell loop
/// that never sleeps. Bounded twice: ``stop()`` kills it, and `timeout` ends it on its own if the bench dies.
final class CPUHog: Sendable {
    private let process: Process

    private init(process: Process) {
        self.process = process
    }

    /// Starts the loop at normal priority; it ends by itself after `limit`.
    static func start(limit: Duration) throws -> CPUHog {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = [String(Int(limit.seconds.rounded(.up))), "/bin/sh", "-c", "while :; do :; done"]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return CPUHog(process: process)
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }
}
