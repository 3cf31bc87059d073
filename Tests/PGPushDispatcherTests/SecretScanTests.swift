import Crypto
import Foundation
import PGPushTestSupport
import PostgresNIO
import Testing

/// The worker and the CLI driven through their error paths (a key file that is no key, a provider token APNs
/// rejects, a wrong certificate passphrase, a wrong database password), in both log formats: nothing they
/// print carries a secret or a whole device token.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(4)))
    struct SecretScanTests {
        static let passphraseVariable = "PGPUSH_SCAN_TEST_PASSPHRASE"
        static let wrongPassphrase = "Wr0ng-Passphrase-4711"
        static let wrongDatabasePassword = "Wr0ng-DbPass-0815"
        static let garbageKeyMaterial = "U0VDUkVUS0VZTUFURVJJQUxYWVo"

        @Test(arguments: ["text", "json"])
        func nothingSecretReachesTheLogs(format: String) async throws {
            let directory = NSTemporaryDirectory() + "pgpush-scan-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try TLSFailureTests.shell("""
                set -e; cd \(directory)
                openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out cert.pem -days 2 -subj "/CN=scan"
                openssl pkey -in key.pem -aes256 -passout pass:Right-Passphrase -out encrypted-key.pem
                cat cert.pem encrypted-key.pem > encrypted.pem
                """)
            let garbageKey = directory + "/garbage.p8"
            try "-----BEGIN PRIVATE KEY-----\n\(Self.garbageKeyMaterial)\n-----END PRIVATE KEY-----\n".write(toFile: garbageKey, atomically: true, encoding: .utf8)
            let unknownKey = P256.Signing.PrivateKey()
            let unknownKeyFile = directory + "/unknown.p8"
            try unknownKey.pemRepresentation.write(toFile: unknownKeyFile, atomically: true, encoding: .utf8)
            setenv(Self.passphraseVariable, Self.wrongPassphrase, 1)

            try await Fleet.with(configure: { $0.allowedTopics = ["com.example.app"] }) { fleet in
                try await fleet.createApp()
                try await fleet.db.exec("""
                    INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path) VALUES
                      ('garbage', 'com.example.app', 'TEAM123456', 'GARBAGEKEY', \(garbageKey)),
                      ('rejected', 'com.example.app', 'TEAM123456', 'UNKNOWNKEY', \(unknownKeyFile)),
                      ('wrongtopic', 'com.example.elsewhere', 'TEAM123456', 'KEY1234567', \(fleet.keyPath))
                    """)
                try await fleet.db.exec("""
                    INSERT INTO push.apps (id, topic, certificate_path, certificate_password_env)
                    VALUES ('encrypted', 'com.example.app', \(directory + "/encrypted.pem"), \(Self.passphraseVariable))
                    """)
                var jobs: [Int64] = []
                for app in ["app", "garbage", "rejected", "wrongtopic", "encrypted"] {
                    try await fleet.registerDevices(20, app: app)
                    jobs.append(try await fleet.enqueue(app: app))
                }
                // Dead and malformed tokens, whose answers name them.
                try await fleet.db.exec("""
                    INSERT INTO push.devices (app_id, token, registered_at)
                    VALUES ('app', 'dead' || repeat('7', 60), now() - interval '1 day'), ('app', 'bad0' || repeat('8', 60), now())
                    """)
                let worker = try fleet.startWorker(logFormat: format, logLevel: "debug")
                #expect(try await fleet.waitForJob(jobs[0], timeout: .seconds(60)) != "timeout")
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(60)) {
                    try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 4
                }
                await worker.stop()

                // A wrong database password: the worker retries and says why; the CLI says why and exits.
                _ = try? await fleet.db.exec("CREATE ROLE pgpush_password_auth NOLOGIN")
                let login = try await fleet.db.createLogin(memberOf: "pgpush_worker")
                try await fleet.db.exec("ALTER ROLE \(unescaped: login) PASSWORD 'Right-DbPass'")
                try await fleet.db.exec("GRANT pgpush_password_auth TO \(unescaped: login)")
                let badURL = fleet.db.urlString(user: "\(login):\(Self.wrongDatabasePassword)")
                let refused = try fleet.startWorker(databaseURL: badURL, logFormat: format, logLevel: "debug")
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                    refused.log.contains("password authentication failed")
                }
                await refused.stop()
                let cli = try Fleet.runPGPush(["stats", "--database-url", badURL, "--log-format", format])

                // The simulator given a key file that is no key, and a client CA that is no certificate.
                let simulatorBadKey = try Fleet.runPGPush([
                    "simulator", "--port", "0", "--cert-dir", directory + "/simulator", "--log-format", format,
                    "--token-key", "TEAM123456:GARBAGEKEY:\(garbageKey)",
                ])
                let simulatorBadCA = try Fleet.runPGPush([
                    "simulator", "--port", "0", "--cert-dir", directory + "/simulator", "--log-format", format,
                    "--client-ca", garbageKey,
                ])
                #expect(simulatorBadKey.stderr.contains(garbageKey), "the error names the file: \(simulatorBadKey.stderr)")
                #expect(!simulatorBadCA.stderr.isEmpty, "the simulator says why it cannot start")

                let printed = worker.log + refused.log + cli.stdout + cli.stderr + simulatorBadKey.stdout + simulatorBadKey.stderr
                    + simulatorBadCA.stdout + simulatorBadCA.stderr
                #expect(refused.log.contains("password authentication failed"), "\(refused.log.suffix(800))")
                #expect(cli.stderr.contains("password authentication failed") || cli.stderr.contains("authentication"), "\(cli.stderr)")

                var secrets = [Self.wrongPassphrase, Self.wrongDatabasePassword, "Right-Passphrase", Self.garbageKeyMaterial]
                secrets += unknownKey.pemRepresentation.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
                for try await jwt in try await fleet.db.rows("SELECT jwt FROM push.provider_tokens").decode(String.self) {
                    secrets.append(String(jwt.split(separator: ".").last ?? ""))
                }
                for secret in secrets where !secret.isEmpty {
                    #expect(!printed.contains(secret), "a secret was printed: \(secret.prefix(6))…")
                }
                // No whole device token: no run of 64 or more hex characters anywhere.
                let wholeToken = try Regex("[0-9A-Fa-f]{64,}")
                let leaked = printed.matches(of: wholeToken).map { String(printed[$0.range].prefix(12)) }
                #expect(leaked.isEmpty, "whole device tokens printed: \(leaked.prefix(5))")
                #expect(worker.log.contains("garbage") && worker.log.contains("InvalidProviderToken"), "the log says what failed")
            }
            unsetenv(Self.passphraseVariable)
        }
    }
}
