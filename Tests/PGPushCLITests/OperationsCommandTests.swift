import Crypto
import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

/// `pgpush migrate`, `pgpush prune`, `pgpush simulator`, `pgpush bench transport` and `pgpush bench provider-token`,
/// through the binary.
@Suite(.database, .timeLimit(.minutes(3)))
struct OperationsCommandTests {
    @Test func migrateAppliesThenReportsNothingToDoAsJSON() async throws {
        try await TestDatabase.with(migrate: false) { db in
            let first = try await CLIProcess.run(["migrate", "--database-url", db.urlString, "--json"])
            #expect(first.status == 0, "\(first)")
            let applied = try #require(try first.json() as? [String: Any])
            #expect((applied["applied"] as? [String])?.first == "0001_schema")
            let second = try await CLIProcess.run(["migrate", "--database-url", db.urlString, "--json"])
            let again = try #require(try second.json() as? [String: Any])
            #expect((again["applied"] as? [String]) == [])
            #expect((again["already_applied"] as? [String])?.count == (applied["applied"] as? [String])?.count)
            // A bad URL is a usage error that names the problem and never echoes a password.
            let bad = try await CLIProcess.run(["migrate", "--database-url", "mysql://root:hunter2@db/x"])
            #expect(bad.status == 64)
            #expect(!bad.stderr.contains("hunter2"))
        }
    }

    @Test func pruneDryRunListsWhatWouldGoAndChangesNothing() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let dead = "dead" + String(repeating: "0", count: 60)
            try await db.exec("INSERT INTO push.devices (app_id, token, registered_at) VALUES ('a', \(dead), now() - interval '2 days')")
            let job = try await db.scalar("SELECT push.enqueue('a', '{\"aps\":{}}', tokens => ARRAY[\(dead)])")
            try await db.exec("""
                INSERT INTO push.prune_candidates (app_id, token, job_id, status, reason, apns_timestamp)
                VALUES ('a', \(dead), \(job), 410, 'Unregistered', now() - interval '1 day')
                """)
            let dry = try await CLIProcess.run(["prune", "--dry-run", "--json", "--database-url", db.urlString])
            #expect(dry.status == 0, "\(dry)")
            let plan = try #require(try dry.json() as? [String: Any])
            let devices = try #require(plan["devices"] as? [[String: Any]])
            #expect(devices.count == 1)
            #expect(devices.first?["reason"] as? String == "Unregistered")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 1)

            let real = try await CLIProcess.run(["prune", "--database-url", db.urlString])
            #expect(real.status == 0, "\(real)")
            #expect(real.stdout.contains("pruned 1 device"))
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.pruned_devices WHERE reason = 'Unregistered'") == 1)
        }
    }

    @Test func benchTransportMeasuresASimulatorProcess() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-ops-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = try Self.makeProviderKey(in: directory)

        let simulator = try CLIProcess([
            "simulator", "--port", "0", "--cert-dir", directory.appendingPathComponent("sim").path,
            "--token-key", "TEAM123456:KEY1234567:\(key)", "--duration", "60",
        ])
        var port: Int?
        try await eventually(timeout: .seconds(30)) {
            port = simulator.stdoutSoFar.split(separator: "\n")
                .first { $0.contains("listening on") }
                .flatMap { $0.split(separator: ":").last }
                .flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            return port != nil
        }
        let bench = try await CLIProcess.run([
            "bench", "transport", "--endpoint", "https://localhost:\(try #require(port))",
            "--ca-file", directory.appendingPathComponent("sim/ca.pem").path, "--topic", "com.example.app",
            "--count", "300", "--connections", "1", "--team-id", "TEAM123456", "--key-id", "KEY1234567",
            "--key-file", key, "--json", "--timeout", "60",
        ], timeout: .seconds(90))
        #expect(bench.status == 0, "\(bench)")
        let report = try #require(try bench.json() as? [String: Any])
        #expect(report["completed"] as? Int == 300)
        #expect(report["succeeded"] as? Int == 300, "\(report)")
        #expect((report["notificationsPerSecond"] as? Double ?? 0) > 0)
        #expect(report["peakRSSKilobytes"] as? Int ?? 0 > 0)
        _ = try? await simulator.finish(timeout: .seconds(1))
    }

    /// The token scripts/bench-transport hands to h2load: a compact ES256 JWT with the key id and team id,
    /// signed by the key file's key, and a clear error for a key file that cannot be read.
    @Test func benchProviderTokenPrintsAJWTSignedByTheKeyFile() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pgpush-jwt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = try Self.makeProviderKey(in: directory)

        let before = Date().timeIntervalSince1970.rounded(.down)
        let result = try await CLIProcess.run(["bench", "provider-token", "--team-id", "TEAM123456", "--key-id", "KEY1234567", "--key-file", key])
        #expect(result.status == 0, "\(result)")
        let parts = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ".").map(String.init)
        try #require(parts.count == 3, "\(result)")
        let (headerData, claimsData, signatureData) = (Self.base64URL(parts[0]), Self.base64URL(parts[1]), Self.base64URL(parts[2]))
        let header = try #require(try JSONSerialization.jsonObject(with: headerData) as? [String: Any])
        let claims = try #require(try JSONSerialization.jsonObject(with: claimsData) as? [String: Any])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "KEY1234567")
        #expect(claims["iss"] as? String == "TEAM123456")
        let issuedAt = try #require(claims["iat"] as? Double)
        #expect(issuedAt >= before && issuedAt <= Date().timeIntervalSince1970)
        let publicKey = try P256.Signing.PrivateKey(pemRepresentation: String(contentsOfFile: key, encoding: .utf8)).publicKey
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: signatureData)
        #expect(publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))

        let missing = directory.appendingPathComponent("absent.p8").path
        let refused = try await CLIProcess.run(["bench", "provider-token", "--team-id", "TEAM123456", "--key-id", "KEY1234567", "--key-file", missing])
        #expect(refused.status != 0)
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr.contains("cannot read key file \(missing)"), "\(refused)")
    }

    /// A fresh P-256 key in Apple's .p8 form (PKCS#8 PEM).
    private static func makeProviderKey(in directory: URL) throws -> String {
        let key = directory.appendingPathComponent("AuthKey.p8").path
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/bin/sh")
        openssl.arguments = ["-c", "openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out '\(key)'"]
        try openssl.run()
        openssl.waitUntilExit()
        try #require(openssl.terminationStatus == 0)
        return key
    }

    /// Decodes unpadded base64url; malformed text gives empty data, which the checks above then reject.
    private static func base64URL(_ text: String) -> Data {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64) ?? Data()
    }
}
