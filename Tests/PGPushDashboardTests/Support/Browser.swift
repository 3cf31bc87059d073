import Foundation

/// Debian's headless Chromium (`/usr/bin/chromium`, which `scripts/test` installs), driven with `--dump-dom`
/// and `--screenshot`: the page as a browser builds it, scripts run, from the dashboard itself.
enum Browser {
    static let path = ProcessInfo.processInfo.environment["PGPUSH_TEST_CHROMIUM"] ?? "/usr/bin/chromium"

    /// The DOM after load. Every host but 127.0.0.1 resolves to nothing, so a page that needed another host
    /// would show it as missing content.
    /// - Parameter virtualTimeMilliseconds: lets the page's timers run this long (in Chromium's virtual time,
    ///   fetches waited for) before the DOM is dumped: the live pages poll meanwhile.
    static func dumpDOM(_ url: String, virtualTimeMilliseconds: Int? = nil) async throws -> String {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-dom-\(UUID().uuidString).html")
        defer { try? FileManager.default.removeItem(at: output) }
        try await run((virtualTimeMilliseconds.map { ["--virtual-time-budget=\($0)"] } ?? []) + ["--dump-dom", url], stdout: output)
        return try String(contentsOf: output, encoding: .utf8)
    }

    static func screenshot(_ url: String, to path: String, width: Int = 1280, height: Int = 900) async throws {
        try await run(["--window-size=\(width),\(height)", "--hide-scrollbars", "--screenshot=\(path)", url], stdout: nil)
    }

    private static func run(_ arguments: [String], stdout: URL?) async throws {
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-chromium-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: profile) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        // --no-sandbox: the tests run as root. The resolver rule keeps every other host unreachable.
        process.arguments = [
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--user-data-dir=\(profile.path)", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        ] + arguments
        if let stdout {
            FileManager.default.createFile(atPath: stdout.path, contents: nil)
            process.standardOutput = try FileHandle(forWritingTo: stdout)
        } else {
            process.standardOutput = FileHandle.nullDevice
        }
        process.standardError = FileHandle.nullDevice
        // Waits without blocking a thread of the cooperative pool, which the dashboard under test needs.
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
            do {
                try process.run()
            } catch {
                process.terminationHandler = nil
                continuation.resume(throwing: error)
            }
        }
        guard status == 0 else { throw BrowserFailure(status: status, arguments: arguments) }
    }

    struct BrowserFailure: Error, CustomStringConvertible {
        let status: Int32
        let arguments: [String]
        var description: String { "chromium exited \(status) for \(arguments.joined(separator: " "))" }
    }
}

extension String {
    /// The markup of the element with this id, from its opening tag to the first closing `</tag>` after it.
    func element(id: String, tag: String) -> String? {
        guard let start = range(of: "id=\"\(id)\"") else { return nil }
        let open = self[..<start.lowerBound].range(of: "<\(tag)", options: .backwards)?.lowerBound ?? start.lowerBound
        guard let end = self[start.upperBound...].range(of: "</\(tag)>") else { return nil }
        return String(self[open..<end.upperBound])
    }

    func occurrences(of needle: String) -> Int {
        components(separatedBy: needle).count - 1
    }
}
