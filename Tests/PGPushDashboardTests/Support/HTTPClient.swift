import Foundation

/// Plain HTTP requests to the dashboard with curl, redirects not followed, for the status codes and headers a
/// browser would not show. (Foundation's URLSession on Linux waited forever on a 401 with `WWW-Authenticate`.)
struct HTTPClient {
    struct Reply {
        let status: Int
        let headers: [(String, String)]
        let body: String

        func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
    }

    struct CurlFailure: Error, CustomStringConvertible {
        let description: String
    }

    static func send(
        _ method: String, _ url: String, credentials: (String, String)? = nil, headers: [String: String] = [:],
        form: String? = nil
    ) async throws -> Reply {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-http-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bodyFile = directory.appendingPathComponent("body"), headerFile = directory.appendingPathComponent("headers")
        var arguments = ["-s", "-S", "--max-time", "15", "-X", method, "-o", bodyFile.path, "-D", headerFile.path]
        if let (user, password) = credentials { arguments += ["-u", "\(user):\(password)"] }
        for (name, value) in headers { arguments += ["-H", "\(name): \(value)"] }
        if let form { arguments += ["--data-binary", form, "-H", "Content-Type: application/x-www-form-urlencoded"] }
        arguments.append(url)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
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
        guard status == 0 else { throw CurlFailure(description: "curl exited \(status) for \(method) \(url)") }
        let rawHeaders = (try? String(contentsOf: headerFile, encoding: .utf8)) ?? ""
        let lines = rawHeaders.components(separatedBy: "\r\n")
        let code = lines.first.flatMap { $0.split(separator: " ").dropFirst().first.flatMap { Int($0) } } ?? 0
        let fields = lines.dropFirst().compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        let body = (try? String(contentsOf: bodyFile, encoding: .utf8)) ?? ""
        return Reply(status: code, headers: fields, body: body)
    }
}
