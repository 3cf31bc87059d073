import Crypto
import CryptoExtras
import Foundation
import Logging
import PGPushCore
import PGPushDevelopment
import PGPushSimulator
import PGPushTestSupport
import PGPushTransport
import Testing

/// `pgpush worker --https-proxy` (and `HTTPS_PROXY`, `NO_PROXY`) end to end: worker processes whose provider
/// connections go through the tests' own CONNECT proxy (Support/ConnectProxy.swift) to the in-process simulators.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct HTTPProxyTests {
        static let user = "proxyuser7"
        /// Needs percent-encoding in a URL: `@`, `:`, `/` and `%`.
        static let password = "p@ss:w0rd/%x"
        static let encodedPassword = "p%40ss%3Aw0rd%2F%25x"

        static func readyz(_ port: Int) async -> (status: Int, body: String) {
            (try? await MetricsEndpointTests.get(port, "/readyz")) ?? (0, "")
        }

        /// A JSON log as text: `http:\/\/` becomes `http://`.
        static func unescaped(_ log: String) -> String {
            log.replacingOccurrences(of: "\\/", with: "/")
        }

        /// The lines of `log` that report a failing proxy.
        static func proxyFailureLines(_ log: String) -> [Substring] {
            log.split(separator: "\n").filter { $0.contains("provider connections through the proxy fail") }
        }

        /// Everything the worker logged must be free of the proxy's password and of the header carrying it.
        static func expectNoCredentials(in log: String, sourceLocation: SourceLocation = #_sourceLocation) {
            let header = ConnectProxy.basic((user, password))
            let log = unescaped(log)
            for secret in [password, encodedPassword, "w0rd", String(header.dropFirst("Basic ".count)), user] {
                #expect(!log.contains(secret), "the worker's log contains \(secret)", sourceLocation: sourceLocation)
            }
        }

        @Test func aWorkerBehindTheProxyDeliversABroadcastAndNeverLogsTheCredentials() async throws {
            try await Fleet.with { fleet in
                let proxy = ConnectProxy(credentials: (Self.user, Self.password))
                let proxyPort = try await proxy.start()
                defer { Task { await proxy.stop() } }
                try await fleet.createApp()
                try await fleet.registerDevices(2000)
                let job = try await fleet.enqueue()
                // The lowercase variable, credentials percent-encoded; debug logging, so no line can hide.
                let worker = try fleet.startWorker(
                    logLevel: "debug",
                    environment: ["https_proxy": "http://\(Self.user):\(Self.encodedPassword)@127.0.0.1:\(proxyPort)"])
                let state = try await fleet.waitForJob(job, timeout: .seconds(120))
                #expect(state == "done", "\(worker.log.suffix(2000))")
                await worker.stop()
                try await BroadcastTests.expectExactlyOnce(fleet, job: job, tokens: 2000)

                // Every provider connection was a tunnel (localhost is not bypassed unless NO_PROXY says so),
                // with Host and the decoded credentials.
                let requests = proxy.requests
                #expect(!requests.isEmpty)
                for request in requests {
                    #expect(request.target == "localhost:\(fleet.port)")
                    #expect(request.host == "localhost:\(fleet.port)")
                    #expect(request.authorization == ConnectProxy.basic((Self.user, Self.password)))
                    #expect(request.status == 200)
                }
                let log = Self.unescaped(worker.log)
                Self.expectNoCredentials(in: log)
                #expect(log.contains("http://***@127.0.0.1:\(proxyPort)"), "\(log.prefix(3000))")
            }
        }

        @Test func noProxyHostsAreReachedDirectly() async throws {
            try await Fleet.with { fleet in
                let proxy = ConnectProxy()
                let proxyPort = try await proxy.start()
                defer { Task { await proxy.stop() } }
                try await fleet.createApp()
                try await fleet.registerDevices(300)
                let job = try await fleet.enqueue()
                // Ports in NO_PROXY are ignored: `localhost:443` covers the simulator's port too.
                let worker = try fleet.startWorker(environment: [
                    "HTTPS_PROXY": "http://127.0.0.1:\(proxyPort)", "NO_PROXY": "example.com, .corp.internal,localhost:443",
                ])
                let state = try await fleet.waitForJob(job, timeout: .seconds(90))
                #expect(state == "done", "\(worker.log.suffix(2000))")
                await worker.stop()
                try await BroadcastTests.expectExactlyOnce(fleet, job: job, tokens: 300)
                #expect(proxy.requests.isEmpty, "\(proxy.requests)")
                // The worker did take the proxy from the environment.
                #expect(Self.unescaped(worker.log).contains("go through the HTTPS proxy http://127.0.0.1:\(proxyPort)"), "\(worker.log.prefix(2000))")
            }
        }

        @Test func aMixedBroadcastReachesAPNsFCMAndTheTokenEndpointThroughTheProxy() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet) { android in
                    let proxy = ConnectProxy(credentials: (Self.user, Self.password))
                    let proxyPort = try await proxy.start()
                    defer { Task { await proxy.stop() } }
                    try await android.createDualApp(fleet)
                    try await fleet.registerDevices(200)
                    try await android.registerDevices(fleet, 100)
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(
                        android.workerArguments + ["--https-proxy", "http://\(Self.user):\(Self.encodedPassword)@127.0.0.1:\(proxyPort)"])
                    let state = try await fleet.waitForJob(job, timeout: .seconds(120))
                    #expect(state == "done", "\(worker.log.suffix(2000))")
                    await worker.stop()
                    #expect(fleet.simulator.ledger.acceptedCount == 200)
                    #expect(android.simulator.ledger.acceptedCount == 100)
                    #expect(android.simulator.statistics.tokenExchanges.values.reduce(0, +) == 1)
                    let targets = Set(proxy.requests.filter { $0.status == 200 }.map(\.target))
                    #expect(targets == ["localhost:\(fleet.port)", "localhost:\(android.port)"])
                    Self.expectNoCredentials(in: worker.log)
                }
            }
        }

        @Test func aProxyThatIsDownMakesTheWorkerNotReadyAndSaysSoEveryFewSecondsUntilItIsBack() async throws {
            try await Fleet.with { fleet in
                let proxyPort = try freeLoopbackPort()
                let metricsPort = try freeLoopbackPort()
                try await fleet.createApp()
                try await fleet.registerDevices(200)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker([
                    "--https-proxy", "http://\(Self.user):\(Self.encodedPassword)@127.0.0.1:\(proxyPort)",
                    "--metrics-port=\(metricsPort)", "--metrics-host", "127.0.0.1",
                    // The tokens wait for the proxy instead of using up their attempts.
                    "--max-attempts", "1000", "--retry-base-delay", "0.5", "--retry-max-delay", "1",
                ])
                var notReady = (status: 0, body: "")
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(60)) {
                    notReady = await Self.readyz(metricsPort)
                    return notReady.status == 503 && notReady.body.contains("proxy")
                }
                #expect(notReady.status == 503)
                #expect(notReady.body.contains("http://***@127.0.0.1:\(proxyPort)"), "\(notReady.body)")
                #expect(notReady.body.contains("connection refused"), "\(notReady.body)")
                #expect(!notReady.body.contains(Self.user))

                // Twelve seconds of refusals from every connection of the pool: one line at once, then one every
                // five seconds or so, never one per attempt.
                let firstSeen = ContinuousClock.now
                try await Task.sleep(for: .seconds(12))
                let lines = Self.proxyFailureLines(worker.log)
                let window = (ContinuousClock.now - firstSeen).inSeconds
                #expect(lines.count >= 1 && Double(lines.count) <= window / 5 + 2, "\(lines.joined(separator: "\n"))")
                #expect(lines.allSatisfy { $0.contains("127.0.0.1:\(proxyPort)") && $0.contains("connection refused") })
                #expect(!worker.log.contains("connection attempt failed"), "\(worker.log.suffix(2000))")
                #expect(await Self.readyz(metricsPort).status == 503)

                // The proxy comes up: the worker is ready again by itself, and the broadcast goes out.
                let proxy = ConnectProxy(credentials: (Self.user, Self.password))
                try await proxy.start(port: proxyPort)
                defer { Task { await proxy.stop() } }
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(60)) { await Self.readyz(metricsPort).status == 200 }
                #expect(await Self.readyz(metricsPort).status == 200)
                let state = try await fleet.waitForJob(job, timeout: .seconds(90))
                #expect(state == "done", "\(worker.log.suffix(2000))")
                #expect(worker.log.contains("tunnels to the providers again; ready"), "\(worker.log.suffix(2000))")
                worker.signal(SIGTERM)
                #expect(await worker.waitForExit(timeout: .seconds(40)) == 0)
                try await BroadcastTests.expectExactlyOnce(fleet, job: job, tokens: 200)
                Self.expectNoCredentials(in: worker.log)
            }
        }

        @Test func aProxyAnswering407MakesTheWorkerNotReadyUntilItAcceptsTheCredentials() async throws {
            try await Fleet.with { fleet in
                let proxy = ConnectProxy(credentials: (Self.user, "the-right-one"))
                let proxyPort = try await proxy.start()
                defer { Task { await proxy.stop() } }
                let metricsPort = try freeLoopbackPort()
                try await fleet.createApp()
                try await fleet.registerDevices(100)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker([
                    "--https-proxy", "http://\(Self.user):\(Self.encodedPassword)@127.0.0.1:\(proxyPort)",
                    "--metrics-port=\(metricsPort)", "--metrics-host", "127.0.0.1",
                    "--max-attempts", "1000", "--retry-base-delay", "0.5", "--retry-max-delay", "1",
                ])
                var notReady = (status: 0, body: "")
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(60)) {
                    notReady = await Self.readyz(metricsPort)
                    return notReady.status == 503 && notReady.body.contains("407")
                }
                #expect(notReady.body.contains("407 Proxy Authentication Required"), "\(notReady.body)")
                #expect(notReady.body.contains("http://***@127.0.0.1:\(proxyPort)"), "\(notReady.body)")
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(20)) { !Self.proxyFailureLines(worker.log).isEmpty }
                let line = try #require(Self.proxyFailureLines(worker.log).first)
                #expect(line.contains("407 Proxy Authentication Required") && line.contains("127.0.0.1:\(proxyPort)"), "\(line)")
                // The credentials were sent, and refused.
                #expect(proxy.requests.contains { $0.status == 407 && $0.authorization == ConnectProxy.basic((Self.user, Self.password)) })

                // The proxy's administrator fixes the account: the worker recovers without a restart.
                proxy.require((Self.user, Self.password))
                try await DeliveryPolicyTests.waitUntil(timeout: .seconds(60)) { await Self.readyz(metricsPort).status == 200 }
                let state = try await fleet.waitForJob(job, timeout: .seconds(90))
                #expect(state == "done", "\(worker.log.suffix(2000))")
                await worker.stop()
                try await BroadcastTests.expectExactlyOnce(fleet, job: job, tokens: 100)
                Self.expectNoCredentials(in: worker.log)
            }
        }
    }
}

/// The proxy at the transport's level, in-process (no database): a pool's refusals and recovery, and the FCM
/// token exchange's own connection.
@Suite(.network, .timeLimit(.minutes(3)))
struct HTTPProxyTransportTests {
    static var logger: Logger {
        var logger = Logger(label: "pgpush.test.proxy")
        logger.logLevel = .critical
        return logger
    }

    static func request() -> APNsRequest {
        let token = "f" + String((0..<63).map { _ in "0123456789abcdef".randomElement()! })
        return APNsRequest(deviceToken: token, topic: "com.example.app", apnsID: UUID(), payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8))
    }

    @Test func aPoolBehindARefusingProxyFailsWithTheProxysAnswerThenRecovers() async throws {
        let key = P256.Signing.PrivateKey()
        var simulatorConfiguration = APNsSimulatorConfiguration()
        simulatorConfiguration.certificateDirectory = NSTemporaryDirectory() + "pgpush-proxy-\(UUID().uuidString)"
        simulatorConfiguration.tokenKeys = [SimulatorTokenKey(teamID: "TEAM123456", keyID: "KEY1234567", publicKey: key.publicKey)]
        let simulator = APNsSimulator(configuration: simulatorConfiguration, logger: Self.logger)
        let port = try await simulator.start()
        let proxy = ConnectProxy(credentials: ("u", "right"))
        let proxyPort = try await proxy.start()
        defer { Task { await proxy.stop(); await simulator.shutdown() } }

        var client = HTTP2ClientConfiguration(endpoint: .custom(host: "localhost", port: port))
        client.additionalTrustRootsPEMFile = simulator.caCertificatePath
        client.connectionsPerPool = 1
        client.connectTimeout = .seconds(20)
        client.reconnectBackoff = ReconnectBackoff(minimum: .milliseconds(20), maximum: .milliseconds(200))
        let proxyConfiguration = try HTTPProxyConfiguration(url: "http://u:wrong@127.0.0.1:\(proxyPort)")
        client.proxy = proxyConfiguration
        let signer = try ProviderTokenSigner(teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: key.pemRepresentation)
        let pool = try HTTP2ConnectionPool(
            configuration: client, credentials: .token(LocalProviderTokenSource(signer: signer)), logger: Self.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pool.run() }
            defer { group.cancelAll() }
            var refused: ProviderOutcome?
            try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(20)) {
                refused = await pool.send(Self.request())
                return refused?.status == 0
            }
            guard case .noResponse(.connectFailed(let detail))? = refused else {
                Issue.record("expected connectFailed, got \(String(describing: refused))")
                return
            }
            #expect(detail.contains("407 Proxy Authentication Required"), "\(detail)")
            #expect(detail.contains("http://***@127.0.0.1:\(proxyPort)") && !detail.contains("wrong"), "\(detail)")
            #expect(proxyConfiguration.status.problem?.contains("407") == true)
            #expect(proxy.requests.first?.authorization == ConnectProxy.basic(("u", "wrong")))

            proxy.require(("u", "wrong"))
            try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(20)) { await pool.send(Self.request()).status == 200 }
            #expect(proxyConfiguration.status.problem == nil)
            #expect(simulator.ledger.acceptedCount >= 1)
        }
    }

    @Test func theFCMTokenExchangeTunnelsThroughTheProxy() async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        var configuration = FCMSimulatorConfiguration()
        configuration.certificateDirectory = NSTemporaryDirectory() + "pgpush-proxy-fcm-\(UUID().uuidString)"
        configuration.serviceAccounts = [FCMSimulatorServiceAccount(
            clientEmail: AndroidSide.clientEmail, projectID: AndroidSide.projectID, publicKey: key.publicKey, privateKeyID: "key-1")]
        let simulator = FCMSimulator(configuration: configuration, logger: Self.logger)
        let port = try await simulator.start()
        let proxy = ConnectProxy(credentials: ("u", "p"))
        let proxyPort = try await proxy.start()
        defer { Task { await proxy.stop(); await simulator.shutdown() } }
        let json: [String: String] = [
            "type": "service_account", "project_id": AndroidSide.projectID, "private_key_id": "key-1",
            "private_key": key.pkcs8PEMRepresentation, "client_email": AndroidSide.clientEmail,
            "token_uri": "https://localhost:\(port)/token",
        ]
        let account = try FCMServiceAccount(json: Array(try JSONSerialization.data(withJSONObject: json)))
        let exchange = FCMTokenExchange(
            additionalTrustRootsPEMFile: simulator.caCertificatePath,
            proxy: try HTTPProxyConfiguration(url: "http://u:p@127.0.0.1:\(proxyPort)"))
        let token = try await exchange.exchange(for: account, logger: Self.logger)
        #expect(!token.value.isEmpty)
        #expect(proxy.requests.map(\.target) == ["localhost:\(port)"])
        #expect(proxy.requests.first?.authorization == ConnectProxy.basic(("u", "p")))
    }

    /// `pgpush worker` refuses a proxy URL it cannot use before it does anything else, with exit code 64 and a
    /// message that names the flag or variable and never the password.
    @Test(arguments: [
        (["--https-proxy", "https://u:secret-pw@proxy.example:3128"], [String: String](), ["--https-proxy", "https://", "not supported", "use http://"]),
        (["--https-proxy", "socks5://proxy.example:1080"], [:], ["--https-proxy", "socks5://", "only http://"]),
        (["--https-proxy", "http://:3128"], [:], ["--https-proxy", "has no host"]),
        (["--https-proxy", "proxy.example:3128"], [:], ["--https-proxy", "must be an http:// URL"]),
        (["--https-proxy", "http://u:secret-pw@proxy.example:99999"], [:], ["--https-proxy", "invalid port", "http://***@proxy.example:99999"]),
        ([], ["HTTPS_PROXY": "ftp://u:secret-pw@proxy.example"], ["HTTPS_PROXY", "ftp://"]),
    ])
    func aBadProxyURLIsRefusedAtStart(arguments: [String], environment: [String: String], expected: [String]) async throws {
        let logPath = NSTemporaryDirectory() + "pgpush-bad-proxy-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: logPath) }
        let worker = try WorkerProcess(
            arguments: ["worker", "--database-url", "postgres://nobody@127.0.0.1:1/none", "--metrics-port=-1"] + arguments,
            logPath: logPath, environment: environment)
        let status = await worker.waitForExit(timeout: .seconds(30))
        #expect(status == 64, "\(worker.log)")
        for text in expected {
            #expect(worker.log.contains(text), "\(worker.log)")
        }
        #expect(!worker.log.contains("secret-pw"), "\(worker.log)")
    }
}
