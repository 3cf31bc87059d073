import Foundation
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Testing

/// Client certificates made with the `openssl` command line tool in a temporary directory.
struct TransportTestCertificates {
    let directory: String
    var caCertificate: String { directory + "/client-ca.pem" }
    var clientPEM: String { directory + "/client.pem" }  // certificate and key in one file
    var clientCertificate: String { directory + "/client-cert.pem" }
    var clientKey: String { directory + "/client-key.pem" }
    var clientP12: String { directory + "/client.p12" }
    var strangerPEM: String { directory + "/stranger.pem" }  // self-signed, not from the CA
    let p12Passphrase = "s3cret-passphrase"

    init() throws {
        directory = NSTemporaryDirectory() + "pgpush-client-certs-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let d = directory
        try Self.shell("""
            cd \(d) && \
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout client-ca-key.pem \
              -out client-ca.pem -days 2 -subj "/CN=pgpush test client CA" \
              -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign && \
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout client-key.pem \
              -out client.csr -subj "/CN=com.example.pgpush" && \
            printf 'basicConstraints=CA:FALSE\\nkeyUsage=critical,digitalSignature\\nextendedKeyUsage=clientAuth\\n' > ext.cnf && \
            openssl x509 -req -in client.csr -CA client-ca.pem -CAkey client-ca-key.pem -CAcreateserial \
              -out client-cert.pem -days 2 -extfile ext.cnf && \
            cat client-cert.pem client-key.pem > client.pem && \
            openssl pkcs12 -export -inkey client-key.pem -in client-cert.pem -out client.p12 \
              -passout pass:\(p12Passphrase) && \
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout stranger-key.pem \
              -out stranger-cert.pem -days 2 -subj "/CN=stranger" && \
            cat stranger-cert.pem stranger-key.pem > stranger.pem
            """)
    }

    static func shell(_ script: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw PGPushError(.internal, "openssl failed with status \(process.terminationStatus)")
        }
    }
}

@Suite("APNs transport over TLS: authentication", .serialized, .network)
struct TransportAuthenticationTests {
    private func certificateSimulator(_ certificates: TransportTestCertificates) -> APNsSimulatorConfiguration {
        var configuration = TransportTest.simulatorConfiguration(key: nil)
        configuration.clientCertificateCAFile = certificates.caCertificate
        return configuration
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func certificateAuthenticationIsAcceptedFromPEMAndPKCS12(engine: HTTP2Engine) async throws {
        let certificates = try TransportTestCertificates()
        let variants: [APNsClientCertificate] = [
            try APNsClientCertificate(pemFile: certificates.clientPEM),
            try APNsClientCertificate(certificatePEMFile: certificates.clientCertificate, keyPEMFile: certificates.clientKey),
            try APNsClientCertificate(pkcs12File: certificates.clientP12, passphrase: certificates.p12Passphrase),
        ]
        for certificate in variants {
            try await TransportTest.withPool(
                simulator: certificateSimulator(certificates),
                client: { TransportTest.clientConfiguration(port: $0, caFile: $1, engine: engine) },
                credentials: .certificate(certificate)
            ) { pool, simulator in
                let tokens = (0..<50).map { _ in TransportTest.randomToken() }
                let results = await TransportTest.sendAllUntilAnswered(pool: pool, tokens: tokens, concurrency: 50, maximumAttempts: 1)
                #expect(results.values.allSatisfy { $0.last?.status == 200 })
                #expect(simulator.ledger.acceptedCount == 50)
                // Certificate connections are not held to one stream before the first success.
                #expect(pool.statistics.effectiveStreamLimits == [1000])
            }
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func certificateNotFromTheTrustedCAIsRefused(engine: HTTP2Engine) async throws {
        let certificates = try TransportTestCertificates()
        let stranger = try APNsClientCertificate(pemFile: certificates.strangerPEM)
        try await TransportTest.withPool(
            simulator: certificateSimulator(certificates),
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, engine: engine) },
            credentials: .certificate(stranger)
        ) { pool, simulator in
            // A refusal no reconnect can fix: the caller is told so, with a reason fit for the app's pause.
            for _ in 0..<2 {
                let outcome = await pool.send(TransportTest.request(token: TransportTest.randomToken()))
                guard case .noResponse(.tlsRejected(let reason)) = outcome else {
                    Issue.record("expected a TLS rejection, got \(outcome)")
                    return
                }
                #expect(reason.hasPrefix("TLSCertificateRejected"), "\(reason)")
                #expect(classify(outcome) == .configurationError(reason: reason))
            }
            #expect(simulator.ledger.acceptedCount == 0)
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func aServerCertificateFromAnotherCAIsATLSRejectionNotATransientFailure(engine: HTTP2Engine) async throws {
        let certificates = try TransportTestCertificates()
        try await TransportTest.withPool(
            simulator: TransportTest.simulatorConfiguration(key: nil),
            // The client CA did not sign the simulator's server certificate.
            client: { port, _ in TransportTest.clientConfiguration(port: port, caFile: certificates.caCertificate, engine: engine) },
            credentials: .certificate(try APNsClientCertificate(pemFile: certificates.clientPEM))
        ) { pool, simulator in
            let outcome = await pool.send(TransportTest.request(token: TransportTest.randomToken()))
            guard case .noResponse(.tlsRejected(let reason)) = outcome else {
                Issue.record("expected a TLS rejection, got \(outcome)")
                return
            }
            #expect(reason.hasPrefix("TLSServerNotTrusted"), "\(reason)")
            #expect(simulator.ledger.acceptedCount == 0)
        }
    }

    @Test func aClientCertificatesExpiryIsReadable() throws {
        let certificates = try TransportTestCertificates()
        let certificate = try APNsClientCertificate(pemFile: certificates.clientPEM)
        // Issued for two days.
        #expect(certificate.expiresAt.timeIntervalSinceNow > 86_400)
        #expect(certificate.expiresAt.timeIntervalSinceNow < 3 * 86_400)
    }

    @Test func credentialLoadingErrorsAreCodedAndHideSecrets() throws {
        let certificates = try TransportTestCertificates()
        do {
            _ = try APNsClientCertificate(pkcs12File: certificates.clientP12, passphrase: "wrong-passphrase-xyz")
            Issue.record("a wrong passphrase must fail")
        } catch let error as PGPushError {
            #expect(error.code == .invalidCredential)
            #expect(!error.description.contains("wrong-passphrase-xyz"))
            #expect(!String(reflecting: error).contains("wrong-passphrase-xyz"))
        }
        do {
            _ = try APNsClientCertificate(pemFile: certificates.directory + "/missing.pem")
            Issue.record("a missing file must fail")
        } catch let error as PGPushError {
            #expect(error.code == .credentialUnreadable)
        }
        do {
            // A key file alone has no certificate.
            _ = try APNsClientCertificate(pemFile: certificates.clientKey)
            Issue.record("a file without a certificate must fail")
        } catch let error as PGPushError {
            #expect(error.code == .invalidCredential)
            #expect(!error.description.contains("PRIVATE KEY"))
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func providerTokenIsReusedBeforeFiftyMinutesAndReplacedAfter(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        let clock = ManualWallClock(Date())
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.now = { clock.now() }
        let source = try key.tokenSource(clock: clock)
        try await TransportTest.withPool(
            simulator: simulator,
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, engine: engine) },
            credentials: .token(source)
        ) { pool, simulator in
            let tokenKey = "\(key.teamID).\(key.keyID)"
            #expect(await pool.send(TransportTest.request(token: TransportTest.randomToken())).status == 200)
            let first = try await source.currentToken()

            clock.advance(by: 49 * 60)
            #expect(await pool.send(TransportTest.request(token: TransportTest.randomToken())).status == 200)
            #expect(try await source.currentToken() == first)
            #expect(await source.mintCount == 1)
            #expect(simulator.statistics.distinctProviderTokens[tokenKey] == 1)

            clock.advance(by: 2 * 60)
            #expect(await pool.send(TransportTest.request(token: TransportTest.randomToken())).status == 200)
            #expect(try await source.currentToken() != first)
            #expect(await source.mintCount == 2)
            #expect(simulator.statistics.distinctProviderTokens[tokenKey] == 2)
            #expect(simulator.statistics.tooManyProviderTokenUpdatesSent == 0)
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func unknownSigningKeyIsRejectedWith403(engine: HTTP2Engine) async throws {
        let trusted = TransportTestKey()
        let untrusted = TransportTestKey()
        try await TransportTest.withPool(
            simulator: TransportTest.simulatorConfiguration(key: trusted),
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, engine: engine) },
            credentials: .token(try untrusted.tokenSource())
        ) { pool, simulator in
            let outcome = await pool.send(TransportTest.request(token: TransportTest.randomToken()))
            guard case .response(let response) = outcome else {
                Issue.record("expected a response, got \(outcome)")
                return
            }
            #expect(response.status == 403)
            #expect(response.reason == "InvalidProviderToken")
            // Still one stream: the rejection did not unlock the connection.
            #expect(pool.statistics.effectiveStreamLimits == [1])
            #expect(simulator.ledger.acceptedCount == 0)
        }
    }
}
