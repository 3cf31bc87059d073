import Foundation
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// TLS failures a reconnect cannot fix pause the app with a readable reason; they are never retried until
/// every token's attempts are spent, and nothing is lost: once fixed and resumed, the job delivers everything.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct TLSFailureTests {
        /// Certificates made with the openssl command line tool in `directory`: a client CA, a client certificate
        /// it signed, one that expired at issue, and a self-signed stranger. Each PEM holds certificate and key.
        struct ClientCertificates {
            let directory: String
            var ca: String { directory + "/client-ca.pem" }
            var valid: String { directory + "/valid.pem" }
            var expired: String { directory + "/expired.pem" }
            var stranger: String { directory + "/stranger.pem" }

            init(in directory: String) throws {
                self.directory = directory
                let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
                try shell("""
                    set -e; cd \(directory)
                    openssl req -x509 \(ec) -keyout client-ca-key.pem -out client-ca.pem -days 2 -subj "/CN=client CA" \
                      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
                    printf 'basicConstraints=CA:FALSE\\nkeyUsage=critical,digitalSignature\\nextendedKeyUsage=clientAuth\\n' > ext.cnf
                    for name in valid expired; do
                      openssl req \(ec) -keyout $name-key.pem -out $name.csr -subj "/CN=com.example.$name"
                    done
                    openssl x509 -req -in valid.csr -CA client-ca.pem -CAkey client-ca-key.pem -CAcreateserial \
                      -out valid-cert.pem -days 2 -extfile ext.cnf
                    openssl x509 -req -in expired.csr -CA client-ca.pem -CAkey client-ca-key.pem -CAcreateserial \
                      -out expired-cert.pem -days 0 -extfile ext.cnf
                    openssl req -x509 \(ec) -keyout stranger-key.pem -out stranger-cert.pem -days 2 -subj "/CN=stranger"
                    for name in valid expired stranger; do cat $name-cert.pem $name-key.pem > $name.pem; done
                    """)
            }
        }

        static func shell(_ script: String) throws {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", script]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            try #require(process.terminationStatus == 0, "openssl failed")
        }

        static func pausedReason(_ fleet: Fleet, app: String, within timeout: Duration) async throws -> String? {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                let rows = try await fleet.db.rows("SELECT paused_reason FROM push.apps WHERE id = \(app)")
                for try await reason in rows.decode(String?.self) {
                    if let reason { return reason }
                }
                try await Task.sleep(for: .milliseconds(200))
            }
            return nil
        }

        @Test func aServerTheWorkerDoesNotTrustPausesTheAppAndLosesNothing() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(50)
                let job = try await fleet.enqueue()
                let otherCA = fleet.directory + "/other-ca.pem"
                try Self.shell("""
                    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout \(fleet.directory)/other-ca-key.pem \
                      -out \(otherCA) -days 2 -subj "/CN=another CA"
                    """)
                let untrusting = try fleet.startWorker(apnsCAFile: otherCA)
                let reason = try await Self.pausedReason(fleet, app: "app", within: .seconds(30))
                #expect(reason?.hasPrefix("TLSServerNotTrusted") == true, "paused_reason: \(reason ?? "none"); \(untrusting.log.suffix(1500))")
                await untrusting.stop()
                #expect(fleet.simulator.ledger.acceptedCount == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 0, "no token spent")
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state IN ('queued', 'running')") == 1)

                try await fleet.db.exec("UPDATE push.apps SET paused_reason = NULL WHERE id = 'app'")
                let fixed = try fleet.startWorker()
                #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "done", "\(fixed.log.suffix(1500))")
                await fixed.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status = 200") == 50)
            }
        }

        @Test func anExpiredOrRefusedClientCertificatePausesItsAppAndOthersGoOn() async throws {
            let directory = NSTemporaryDirectory() + "pgpush-tls-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let certificates = try ClientCertificates(in: directory)
            try await Fleet.with(configure: { $0.clientCertificateCAFile = certificates.ca }) { fleet in
                var jobs: [String: Int64] = [:]
                for (app, path) in [("valid", certificates.valid), ("expired", certificates.expired), ("stranger", certificates.stranger)] {
                    try await fleet.db.exec("""
                        INSERT INTO push.apps (id, topic, certificate_path) VALUES (\(app), \("com.example." + app), \(path))
                        """)
                    try await fleet.registerDevices(30, app: app)
                    jobs[app] = try await fleet.enqueue(app: app)
                }
                let worker = try fleet.startWorker()
                #expect(try await fleet.waitForJob(jobs["valid"]!, timeout: .seconds(60)) == "done", "\(worker.log.suffix(1500))")
                let expired = try await Self.pausedReason(fleet, app: "expired", within: .seconds(30))
                #expect(expired?.contains("certificate_path \(certificates.expired) expired on") == true, "\(expired ?? "not paused")")
                let stranger = try await Self.pausedReason(fleet, app: "stranger", within: .seconds(30))
                #expect(stranger?.hasPrefix("TLSCertificateRejected") == true, "\(stranger ?? "not paused"); \(worker.log.suffix(1500))")
                await worker.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(jobs["valid"]!) AND status = 200") == 30)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE app_id IN ('expired', 'stranger')") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE app_id IN ('expired', 'stranger') AND state IN ('queued', 'running')") == 2)
                #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE id = 'valid' AND paused_reason IS NULL") == 1)
            }
        }
    }
}
