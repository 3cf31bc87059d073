import Foundation
import PGPushDevelopment
import PGPushStore
import PGPushTestSupport
import Testing

/// A PostgreSQL that accepts TLS only (`ssl = on`, its own CA, `hostssl` rules): the CLI and the worker connect
/// with `sslmode=verify-full` and the CA; without TLS, with the wrong CA or under the wrong host name they are
/// refused with a message that says so.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(3)))
    struct DatabaseTLSTests {
        struct Certificates {
            let directory: String
            var ca: String { directory + "/ca.pem" }
            var otherCA: String { directory + "/other-ca.pem" }

            init() throws {
                directory = NSTemporaryDirectory() + "pgpush-pgtls-\(UUID().uuidString)"
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
                try TLSFailureTests.shell("""
                    set -e; cd \(directory)
                    openssl req -x509 \(ec) -keyout ca-key.pem -out ca.pem -days 2 -subj "/CN=test PostgreSQL CA" \
                      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
                    openssl req -x509 \(ec) -keyout other-ca-key.pem -out other-ca.pem -days 2 -subj "/CN=another CA" \
                      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
                    openssl req \(ec) -keyout server-key.pem -out server.csr -subj "/CN=localhost"
                    printf 'subjectAltName=DNS:localhost\\nextendedKeyUsage=serverAuth\\n' > ext.cnf
                    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile ext.cnf
                    """)
            }
        }

        @Test func verifyFullConnectsAndEveryWrongSetupIsRefusedClearly() async throws {
            let certificates = try Certificates()
            defer { try? FileManager.default.removeItem(atPath: certificates.directory) }
            let cluster = try ThrowawayPostgres.start { data in
                for file in ["server.pem", "server-key.pem"] {
                    try FileManager.default.copyItem(atPath: certificates.directory + "/" + file, toPath: data + "/" + file)
                    try FileManager.default.setAttributes([.ownerAccountName: "postgres", .posixPermissions: 0o600], ofItemAtPath: data + "/" + file)
                }
                let settings = try FileHandle(forWritingTo: URL(fileURLWithPath: data + "/postgresql.conf"))
                try settings.seekToEnd()
                try settings.write(contentsOf: Data("\nssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server-key.pem'\n".utf8))
                try settings.close()
                // TLS only over TCP; the socket stays for the cluster's own tools.
                try "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n"
                    .write(toFile: data + "/pg_hba.conf", atomically: false, encoding: .utf8)
            }
            defer { cluster.stop() }
            let base = "postgres://postgres@%@:\(cluster.port)/postgres?sslmode=%@"
            func url(host: String = "localhost", mode: String = "verify-full", ca: String? = nil) -> String {
                String(format: base, host, mode) + (ca.map { "&sslrootcert=\($0)" } ?? "")
            }

            let migrate = try Fleet.runPGPush(["migrate", "--database-url", url(ca: certificates.ca)])
            #expect(migrate.status == 0, "\(migrate.stderr)")

            let worker = try WorkerProcess(arguments: [
                "worker", "--database-url", url(ca: certificates.ca), "--apns-endpoint", "https://localhost:1",
                "--metrics-port=-1", "--worker-id", "tls-worker", "--log-format", "json",
            ], logPath: certificates.directory + "/worker.log")
            try await DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) { worker.log.contains("worker registered") }
            await worker.stop()
            #expect(worker.log.contains("worker registered"), "\(worker.log.suffix(1500))")

            let plain = try Fleet.runPGPush(["stats", "--database-url", url(mode: "disable")])
            #expect(plain.status != 0)
            #expect(plain.stderr.contains("no encryption"), "\(plain.stderr)")

            let wrongCA = try Fleet.runPGPush(["stats", "--database-url", url(ca: certificates.otherCA)])
            #expect(wrongCA.status != 0)
            #expect(wrongCA.stderr.contains("TLS refused: the server's certificate is not signed by the CA in sslrootcert=\(certificates.otherCA)"), "\(wrongCA.stderr)")

            // The certificate names localhost only.
            let wrongHost = try Fleet.runPGPush(["stats", "--database-url", url(host: "127.0.0.1", ca: certificates.ca)])
            #expect(wrongHost.status != 0)
            #expect(wrongHost.stderr.contains("TLS refused: the server's certificate does not name host 127.0.0.1"), "\(wrongHost.stderr)")

            // verify-full without the CA: the system roots do not know this one.
            let noCA = try Fleet.runPGPush(["stats", "--database-url", url()])
            #expect(noCA.status != 0 && noCA.stderr.contains("not signed by the system's CAs"), "\(noCA.stderr)")
            print("TLS refusals:\n\(plain.stderr)\(wrongCA.stderr)\(wrongHost.stderr)\(noCA.stderr)")
        }
    }
}
