import ArgumentParser
import Foundation
import Logging
import PGPushCore
import PGPushSimulator
import ServiceLifecycle

/// `pgpush simulator`: APNs (and, with `--fcm-service-account`, FCM) on loopback, for demos, benchmarks and
/// clients in other processes.
struct SimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulator",
        abstract: "Run an APNs simulator, and optionally an FCM one (HTTP/2 over TLS), with fault injection and a ledger.",
        discussion: """
            Behaves like APNs: request validation with APNs' reasons, provider-token checks, one stream until the
            first success and then 1000, and the device-token prefix rules dead… (410 Unregistered), bad0…
            (BadDeviceToken) and 0e0e… (DeviceTokenNotForTopic). Clients must trust <cert-dir>/ca.pem and
            connect to "localhost" or 127.0.0.1.

            Examples:
              pgpush simulator --token-key TEAM123456:KEY1234567:AuthKey.p8 --topic com.example.app
              pgpush simulator --token-key T:K:key.p8 --error-rate 0.01 --goaway-every 5000 --seed 7 --duration 60

            Live Activities: pushes with apns-push-type liveactivity are checked like APNs does (topic ending in
            .push-type.liveactivity, token authentication only, priority 5 or 10, aps.timestamp, aps.event and the
            fields each event needs). Broadcasts (POST /4/broadcasts/apps/<bundle id>, apns-channel-id,
            apns-expiration, apns-priority) are taken on the same port. The broadcast channel management API
            (POST/GET/DELETE /1/apps/<bundle id>/channels, GET /1/apps/<bundle id>/all-channels) runs on
            --channels-port (default 2195, as APNs' development host; a free port when --port is 0), with the same
            CA and authentication; --channel-limit caps channels per bundle id.

              pgpush simulator --token-key T:K:key.p8 --channels-port 0 --channel-error-rate 0.05

            Prints the port and CA path on start and the ledger summary on exit (SIGINT/SIGTERM or --duration).
            Clients that reach it by another name (a compose service, say) need --certificate-hostname NAME.

            FCM (HTTP v1) runs as well when --fcm-service-account or --fcm-port is given, on its own port (default
            2198) with the same CA. One server answers the OAuth token endpoint (POST /token) and
            POST /v1/projects/{project_id}/messages:send; give each trusted service account a token_uri of
            https://127.0.0.1:PORT/token (or another host name on the certificate). Registration-token prefix rules:
            dead… (404 UNREGISTERED), mismatch… (403 SENDER_ID_MISMATCH), invalid… (400 INVALID_ARGUMENT,
            field message.token), thirdparty… (401 THIRD_PARTY_AUTH_ERROR); --fcm-mismatched-project P makes every
            token sent through project P a SENDER_ID_MISMATCH. --seed and --latency-ms apply to FCM too.

              pgpush simulator --token-key T:K:key.p8 --fcm-service-account sa.json --fcm-quota-exceeded-rate 0.01

            Web Push (RFC 8030/8291/8292) runs as well when --web-push-port, --web-push-http1-port or
            --web-subscriptions is given, with the same CA: --web-push-port (default 2199) serves HTTP/2 to clients
            offering h2 in ALPN and HTTP/1.1 to the others; --web-push-http1-port serves HTTP/1.1 only (no h2 in
            ALPN). --web-subscriptions N FILE makes N subscriptions (split across the Web Push ports) and writes
            them to FILE as a JSON array of PushSubscription.toJSON() objects; the simulator keeps their keys,
            decrypts every message and checks its VAPID token (aud = the endpoint's origin, exp <= 24 h, a sub
            Apple accepts, else 403 BadJwtToken). --web-gone-share S makes that share of them gone, half answered
            410 (ids gone-...), half 404 (ids notfound-...). --seed, --latency-ms and --ledger-keeps-payloads
            apply to Web Push too.

              pgpush simulator --web-push-port 0 --web-push-http1-port 0 --web-subscriptions 1000 subs.json
            """)

    @OptionGroup var logging: LoggingOptions

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to bind (0 picks a free one).") var port = 2197
    @Option(help: ArgumentHelp(
        "Port of the broadcast channel management API (0 picks a free one; default 2195, or a free one when --port is 0).",
        valueName: "port"))
    var channelsPort: Int?
    @Option(help: "Broadcast channels one bundle id may have (APNs: 10000).") var channelLimit = 10_000
    @Option(help: "Fraction of channel management requests answered 503 ServiceUnavailable.") var channelErrorRate: Double = 0
    @Option(help: "Fraction of broadcasts answered 503 ServiceUnavailable.") var broadcastErrorRate: Double = 0
    @Option(help: "Directory of ca.pem, ca-key.pem, server.pem, server-key.pem (generated when absent).")
    var certDir = "./.pgpush-simulator"
    @Flag(help: "Generate a new CA and server certificate even if they exist.") var regenerateCerts = false
    @Option(help: ArgumentHelp("A host name clients reach the simulator by, added to its certificate (repeatable).",
                               valueName: "name"))
    var certificateHostname: [String] = []
    @Option(help: ArgumentHelp("Trusted provider-token key (repeatable); PATH is a .p8 private key or a public key PEM.",
                               valueName: "TEAM:KEYID:PATH"))
    var tokenKey: [String] = []
    @Option(help: "Accept TLS client certificates signed by this CA (PEM): certificate authentication.")
    var clientCA: String?
    @Option(help: "Topic a client certificate may push to (repeatable; none = any).") var certificateTopic: [String] = []
    @Option(help: "Allowed apns-topic (repeatable; none = any).") var topic: [String] = []

    @Option(help: "Seed of every random fault decision.") var seed: UInt64 = 1
    @Option(help: "Fraction of requests answered 500 or 503.") var errorRate: Double = 0
    @Option(help: "Fraction of requests answered in a shape APNs never sends: an unknown status, a broken reason body, a 20 KB header, trailers, or DATA after END_STREAM.")
    var malformedAnswerRate: Double = 0
    @Option(help: "Fraction of device tokens answered 429 TooManyRequests at first.") var tooManyRequestsFraction: Double = 0
    @Option(help: "How many first attempts of those tokens get 429.") var tooManyRequestsAttempts = 1
    @Option(help: "Send GOAWAY once a connection has received N requests.") var goawayEvery: Int?
    @Option(help: "noerror (in-flight streams finish) or abort (they are dropped).") var goawayMode = "noerror"
    @Option(help: "Close a connection abruptly at its N-th request.") var resetEvery: Int?
    @Option(help: ArgumentHelp("Delay each answer: N or MIN-MAX milliseconds.", valueName: "ms")) var latencyMs: String?
    @Flag(help: "Every unlisted device token is BadDeviceToken (a credential for the wrong environment).")
    var badDeviceTokenByDefault = false
    @Option(help: "Append every accepted notification as a JSON line to this file.") var ledgerFile: String?
    @Flag(help: "Keep each accepted notification's payload, as received, in the ledger: a \"payload\" field in --ledger-file lines.")
    var ledgerKeepsPayloads = false
    @Option(help: "Stop by itself after this many seconds.") var duration: Double?

    @Option(help: ArgumentHelp("A service-account JSON file whose key and project the FCM simulator trusts (repeatable; enables FCM).",
                               valueName: "path"))
    var fcmServiceAccount: [String] = []
    @Option(help: "Port of the FCM simulator (enables FCM; default 2198 when FCM runs, 0 picks a free one).")
    var fcmPort: Int?
    @Option(help: ArgumentHelp("The exact aud FCM assertions must carry (default: any https URL of /token on a host name of the certificate).",
                               valueName: "uri"))
    var fcmTokenAudience: String?
    @Option(help: "Lifetime of FCM access tokens, in seconds.") var fcmAccessTokenLifetime: Int = 3600
    @Option(help: "SETTINGS_MAX_CONCURRENT_STREAMS of FCM connections.") var fcmStreamLimit: Int = 100
    @Option(help: "Fraction of FCM sends answered 429 QUOTA_EXCEEDED.") var fcmQuotaExceededRate: Double = 0
    @Option(help: "Retry-After (seconds) of those 429s.") var fcmRetryAfter: Int = 1
    @Option(help: "Fraction of FCM sends answered 503 UNAVAILABLE.") var fcmUnavailableRate: Double = 0
    @Option(help: "Retry-After (seconds) of those 503s (default: none).") var fcmUnavailableRetryAfter: Int?
    @Option(help: "Fraction of FCM sends answered 500 INTERNAL.") var fcmInternalErrorRate: Double = 0
    @Option(help: "FCM: send GOAWAY when the server's request count reaches a multiple of N.") var fcmGoawayEvery: Int?
    @Option(help: "FCM: close a connection abruptly when the server's request count reaches a multiple of N.")
    var fcmResetEvery: Int?
    @Option(help: ArgumentHelp("FCM project whose every token is SENDER_ID_MISMATCH (repeatable).", valueName: "project-id"))
    var fcmMismatchedProject: [String] = []
    @Option(help: "Append every accepted FCM message as a JSON line to this file.") var fcmLedgerFile: String?

    @Option(help: "Port of the Web Push simulator, HTTP/2 and HTTP/1.1 by ALPN (enables Web Push; default 2199 when it runs, 0 picks a free one).")
    var webPushPort: Int?
    @Option(help: "Port of a second Web Push origin that serves HTTP/1.1 only (no h2 in ALPN; 0 picks a free one).")
    var webPushHttp1Port: Int?
    @Option(parsing: .upToNextOption,
            help: ArgumentHelp("Make N Web Push subscriptions and write them to FILE as a JSON array (enables Web Push).",
                               valueName: "N FILE"))
    var webSubscriptions: [String] = []
    @Option(help: ArgumentHelp("Subscriptions are made with this applicationServerKey and refuse other VAPID keys (403).",
                               valueName: "base64url"))
    var webApplicationServerKey: String?
    @Option(help: "Share of the subscriptions made gone: half answered 410, half 404.") var webGoneShare: Double = 0
    @Option(help: "Fraction of Web Push messages answered 429 TooManyRequests.") var webTooManyRequestsRate: Double = 0
    @Option(help: "Retry-After (seconds) of those 429s.") var webRetryAfter: Int = 1
    @Option(help: "Fraction of Web Push messages answered 503 ServiceUnavailable.") var webUnavailableRate: Double = 0
    @Option(help: "Fraction of Web Push messages answered 500 InternalServerError.") var webInternalErrorRate: Double = 0
    @Option(help: "Web Push: GOAWAY (HTTP/2) or close after answering (HTTP/1.1) when the request count reaches a multiple of N.")
    var webGoawayEvery: Int?
    @Option(help: "Web Push: close a connection abruptly when the request count reaches a multiple of N.")
    var webResetEvery: Int?
    @Option(help: "Append every accepted Web Push message as a JSON line to this file.") var webLedgerFile: String?

    /// Whether the FCM simulator runs.
    private var fcmEnabled: Bool { !fcmServiceAccount.isEmpty || fcmPort != nil }
    /// Whether the Web Push simulator runs.
    private var webPushEnabled: Bool { webPushPort != nil || webPushHttp1Port != nil || !webSubscriptions.isEmpty }

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.simulator")
        let configuration = try makeConfiguration()
        let fcmConfiguration = fcmEnabled ? try makeFCMConfiguration() : nil
        let webPushConfigurations = webPushEnabled ? try makeWebPushConfigurations() : []
        let webSubscriptionRequest = try parseWebSubscriptions()
        let simulator = APNsSimulator(configuration: configuration, logger: logger)
        let boundPort = try await simulator.start()
        // Written unbuffered: scripts wait for these lines to learn the port.
        Self.say("pgpush simulator: listening on \(host):\(boundPort)")
        if let channelsPort = simulator.channelsPort {
            // Not "listening on", which scripts take for the device port.
            Self.say("pgpush simulator: broadcast channel management at \(host):\(channelsPort)")
        }
        Self.say("pgpush simulator: CA certificate \(simulator.caCertificatePath)")

        var fcm: FCMSimulator?
        if let fcmConfiguration {
            let fcmSimulator = FCMSimulator(configuration: fcmConfiguration, logger: logger)
            let fcmPort: Int
            do {
                fcmPort = try await fcmSimulator.start()
            } catch {
                await simulator.shutdown()
                throw error
            }
            fcm = fcmSimulator
            // Not "listening on", which scripts take for the APNs port.
            Self.say("pgpush simulator: FCM listening at \(host):\(fcmPort), token URI \(fcmSimulator.tokenURI ?? "")")
            for account in fcmConfiguration.serviceAccounts {
                Self.say("pgpush simulator: FCM trusts \(account.clientEmail) for project \(account.projectID)")
            }
            for warning in tokenURIWarnings(port: fcmPort) { Self.say("pgpush simulator: FCM warning: \(warning)") }
            Self.say("pgpush simulator: \(FCMSimulator.differencesFromFCM)")
        }

        var webPush: [WebPushSimulator] = []
        do {
            webPush = try await startWebPush(webPushConfigurations, logger: logger)
            if let webSubscriptionRequest {
                try writeWebSubscriptions(count: webSubscriptionRequest.count, file: webSubscriptionRequest.file, on: webPush)
            }
        } catch {
            for web in webPush { await web.shutdown() }
            await fcm?.shutdown()
            await simulator.shutdown()
            throw error
        }

        // Read now: a stopped simulator has no port.
        let webOrigins = webPush.map { $0.origin?.serialized ?? "" }

        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: simulator)]
        if let fcm { services.append(.init(service: fcm)) }
        for web in webPush { services.append(.init(service: web)) }
        if let duration {
            services.append(.init(service: SimulatorDeadline(seconds: duration),
                                  successTerminationBehavior: .gracefullyShutdownGroup))
        }
        var groupConfiguration = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], cancellationSignals: [], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(10)
        try await ServiceGroup(configuration: groupConfiguration).run()
        await simulator.shutdown()
        await fcm?.shutdown()
        for web in webPush { await web.shutdown() }
        Self.say("pgpush simulator: \(simulator.summary)")
        if let fcm { Self.say("pgpush simulator: FCM \(fcm.summary)") }
        for (web, origin) in zip(webPush, webOrigins) { Self.say("pgpush simulator: Web Push \(origin) \(web.summary)") }
    }

    private static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    private func makeConfiguration() throws -> APNsSimulatorConfiguration {
        var configuration = APNsSimulatorConfiguration()
        configuration.host = host
        configuration.port = port
        // A throwaway simulator (--port 0) must not collide with another on the fixed channels port.
        configuration.channelsPort = channelsPort ?? (port == 0 ? 0 : 2195)
        guard channelLimit >= 0 else { throw ValidationError("--channel-limit must not be negative") }
        configuration.channelLimit = channelLimit
        for (name, rate) in [("--channel-error-rate", channelErrorRate), ("--broadcast-error-rate", broadcastErrorRate)]
        where !(0...1).contains(rate) {
            throw ValidationError("\(name) must be between 0 and 1")
        }
        configuration.faults.channelManagement.rate = channelErrorRate
        configuration.faults.broadcast.rate = broadcastErrorRate
        configuration.certificateDirectory = certDir
        configuration.regenerateCertificates = regenerateCerts
        configuration.certificateHostnames = certificateHostname
        configuration.tokenKeys = try tokenKey.map(Self.parseTokenKey)
        configuration.clientCertificateCAFile = clientCA
        configuration.certificateTopics = certificateTopic
        configuration.allowedTopics = topic.isEmpty ? nil : Set(topic)
        configuration.registry.badDeviceTokenByDefault = badDeviceTokenByDefault
        configuration.ledgerFile = ledgerFile
        configuration.ledgerKeepsPayloads = ledgerKeepsPayloads
        configuration.faults.seed = seed
        configuration.faults.serverErrorRate = errorRate
        configuration.faults.malformedAnswerRate = malformedAnswerRate
        configuration.faults.tooManyRequestsTokenFraction = tooManyRequestsFraction
        configuration.faults.tooManyRequestsFirstAttempts = tooManyRequestsAttempts
        configuration.faults.goAwayEveryStreams = goawayEvery
        switch goawayMode.lowercased() {
        case "noerror", "no-error": configuration.faults.goAwayMode = .noError
        case "abort": configuration.faults.goAwayMode = .abortInFlight
        default: throw ValidationError("--goaway-mode must be noerror or abort")
        }
        configuration.faults.resetEveryStreams = resetEvery
        if let latencyMs { configuration.faults.latency = try Self.parseLatency(latencyMs) }
        return configuration
    }

    /// The trusted accounts and everything else FCM; shares --host, --cert-dir, --seed and --latency-ms.
    private func makeFCMConfiguration() throws -> FCMSimulatorConfiguration {
        var configuration = FCMSimulatorConfiguration()
        configuration.host = host
        configuration.port = fcmPort ?? 2198
        configuration.certificateDirectory = certDir
        // The APNs simulator, started first, already regenerated them if asked; the two share one CA.
        configuration.regenerateCertificates = false
        configuration.certificateHostnames = certificateHostname
        configuration.serviceAccounts = try fcmServiceAccount.map { FCMSimulatorServiceAccount(try Self.loadServiceAccount($0)) }
        configuration.tokenAudience = fcmTokenAudience
        guard fcmAccessTokenLifetime > 0 else { throw ValidationError("--fcm-access-token-lifetime must be positive") }
        configuration.accessTokenLifetime = .seconds(fcmAccessTokenLifetime)
        guard fcmStreamLimit >= 0 else { throw ValidationError("--fcm-stream-limit must not be negative") }
        configuration.maxConcurrentStreams = fcmStreamLimit
        configuration.registry.mismatchedProjects = Set(fcmMismatchedProject)
        configuration.ledgerFile = fcmLedgerFile
        for (name, rate) in [("--fcm-quota-exceeded-rate", fcmQuotaExceededRate), ("--fcm-unavailable-rate", fcmUnavailableRate),
                             ("--fcm-internal-error-rate", fcmInternalErrorRate)] where !(0...1).contains(rate) {
            throw ValidationError("\(name) must be between 0 and 1")
        }
        guard fcmRetryAfter >= 0, (fcmUnavailableRetryAfter ?? 0) >= 0 else {
            throw ValidationError("--fcm-retry-after and --fcm-unavailable-retry-after must not be negative")
        }
        configuration.faults.seed = seed
        configuration.faults.quotaExceededRate = fcmQuotaExceededRate
        configuration.faults.quotaExceededRetryAfterSeconds = fcmRetryAfter
        configuration.faults.unavailableRate = fcmUnavailableRate
        configuration.faults.unavailableRetryAfterSeconds = fcmUnavailableRetryAfter
        configuration.faults.internalErrorRate = fcmInternalErrorRate
        configuration.faults.goAwayEveryStreams = fcmGoawayEvery
        configuration.faults.resetEveryStreams = fcmResetEvery
        if let latencyMs { configuration.faults.latency = try Self.parseLatency(latencyMs) }
        return configuration
    }

    /// One configuration per Web Push port: the ALPN one (h2 and HTTP/1.1), then the HTTP/1.1-only one.
    /// Shares --host, --cert-dir, --certificate-hostname, --seed, --latency-ms and --ledger-keeps-payloads.
    private func makeWebPushConfigurations() throws -> [WebPushSimulatorConfiguration] {
        for (name, rate) in [("--web-gone-share", webGoneShare), ("--web-too-many-requests-rate", webTooManyRequestsRate),
                             ("--web-unavailable-rate", webUnavailableRate), ("--web-internal-error-rate", webInternalErrorRate)]
        where !(0...1).contains(rate) {
            throw ValidationError("\(name) must be between 0 and 1")
        }
        guard webRetryAfter >= 0 else { throw ValidationError("--web-retry-after must not be negative") }
        if let key = webApplicationServerKey, (try? VAPIDKey.publicKey(applicationServerKey: key)) == nil {
            throw ValidationError("--web-application-server-key is not a base64url uncompressed P-256 public key")
        }
        var base = WebPushSimulatorConfiguration()
        base.host = host
        base.certificateDirectory = certDir
        // The APNs simulator, started first, already regenerated them if asked; all share one CA.
        base.regenerateCertificates = false
        base.certificateHostnames = certificateHostname
        base.ledgerKeepsPayloads = ledgerKeepsPayloads
        base.faults.seed = seed
        base.faults.tooManyRequestsRate = webTooManyRequestsRate
        base.faults.tooManyRequestsRetryAfterSeconds = webRetryAfter
        base.faults.serviceUnavailableRate = webUnavailableRate
        base.faults.internalErrorRate = webInternalErrorRate
        base.faults.goAwayEveryStreams = webGoawayEvery
        base.faults.resetEveryStreams = webResetEvery
        if let latencyMs { base.faults.latency = try Self.parseLatency(latencyMs) }
        var configurations: [WebPushSimulatorConfiguration] = []
        if webPushPort != nil || webPushHttp1Port == nil {
            var configuration = base
            configuration.port = webPushPort ?? (port == 0 ? 0 : 2199)
            configuration.ledgerFile = webLedgerFile
            configurations.append(configuration)
        }
        if let webPushHttp1Port {
            var configuration = base
            configuration.port = webPushHttp1Port
            configuration.http1Only = true
            // Both append whole lines, each buffer of lines in one write.
            configuration.ledgerFile = webLedgerFile
            configurations.append(configuration)
        }
        return configurations
    }

    /// `--web-subscriptions N FILE`.
    private func parseWebSubscriptions() throws -> (count: Int, file: String)? {
        guard !webSubscriptions.isEmpty else { return nil }
        guard webSubscriptions.count == 2, let count = Int(webSubscriptions[0]), count >= 0 else {
            throw ValidationError("--web-subscriptions takes a count and a file: --web-subscriptions 1000 subscriptions.json")
        }
        return (count, webSubscriptions[1])
    }

    private func startWebPush(_ configurations: [WebPushSimulatorConfiguration], logger: Logger) async throws -> [WebPushSimulator] {
        var started: [WebPushSimulator] = []
        do {
            for configuration in configurations {
                let web = WebPushSimulator(configuration: configuration, logger: logger)
                let port = try await web.start()
                started.append(web)
                let protocols = configuration.http1Only ? "HTTP/1.1 only" : "HTTP/2 and HTTP/1.1 by ALPN"
                Self.say("pgpush simulator: Web Push listening at \(host):\(port) (\(protocols)), origin \(web.origin?.serialized ?? "")")
            }
        } catch {
            for web in started { await web.shutdown() }
            throw error
        }
        if !started.isEmpty { Self.say("pgpush simulator: \(WebPushSimulator.differencesFromPushServices)") }
        return started
    }

    /// Makes `count` subscriptions, alternating between the Web Push origins, --web-gone-share of them gone
    /// (410 and 404 in turn), and writes them to `file`.
    private func writeWebSubscriptions(count: Int, file: String, on simulators: [WebPushSimulator]) throws {
        guard !simulators.isEmpty else { return }
        let goneCount = Int((Double(count) * webGoneShare).rounded())
        var subscriptions: [WebPushSimulatorSubscription] = []
        var made: [WebPushSimulatorRegistry.Outcome: Int] = [:]
        for (index, simulator) in simulators.enumerated() {
            // This origin's share of the live, 410 and 404 subscriptions.
            func share(_ total: Int, offset: Int = 0) -> Int {
                (total + simulators.count - 1 - (index + offset) % simulators.count) / simulators.count
            }
            let gone410 = share((goneCount + 1) / 2), gone404 = share(goneCount / 2, offset: 1)
            for (outcome, number) in [(WebPushSimulatorRegistry.Outcome.live, share(count - goneCount)), (.gone, gone410),
                                      (.notFound, gone404)] where number > 0 {
                subscriptions += try simulator.makeSubscriptions(
                    count: number, applicationServerKey: webApplicationServerKey, outcome: outcome)
                made[outcome, default: 0] += number
            }
        }
        do {
            try WebPushSimulatorSubscription.write(subscriptions, toFile: file)
        } catch {
            throw ValidationError("cannot write --web-subscriptions file \(file): \(error)")
        }
        Self.say("pgpush simulator: Web Push wrote \(subscriptions.count) subscriptions to \(file) "
            + "(\(made[.live] ?? 0) live, \(made[.gone] ?? 0) gone 410, \(made[.notFound] ?? 0) not found 404)")
    }

    static func loadServiceAccount(_ path: String) throws -> FCMServiceAccount {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("cannot read service-account file \(path)")
        }
        do {
            return try FCMServiceAccount(json: data)
        } catch {
            throw ValidationError("\(path): \(error.message)")
        }
    }

    /// Accounts whose token_uri would send their assertions somewhere other than this simulator.
    private func tokenURIWarnings(port: Int) -> [String] {
        let hosts = Set(["localhost", "127.0.0.1", host.lowercased()] + certificateHostname.map { $0.lowercased() })
        return fcmServiceAccount.compactMap { path in
            guard let account = try? Self.loadServiceAccount(path) else { return nil }
            let url = account.tokenURI
            if let audience = fcmTokenAudience, url.absoluteString != audience {
                return "\(account.clientEmail)'s token_uri is not --fcm-token-audience"
            }
            guard url.scheme == "https", hosts.contains(url.host?.lowercased() ?? ""), url.path == "/token",
                  url.port == port
            else {
                return "\(account.clientEmail)'s token_uri \(url.absoluteString) is not this simulator's https://…:\(port)/token"
            }
            return nil
        }
    }

    static func parseTokenKey(_ text: String) throws -> SimulatorTokenKey {
        let parts = text.split(separator: ":", maxSplits: 2).map(String.init)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw ValidationError("--token-key must be TEAM:KEYID:PATH")
        }
        guard let pem = try? String(contentsOfFile: parts[2], encoding: .utf8) else {
            throw ValidationError("cannot read key file \(parts[2])")
        }
        do {
            return try SimulatorTokenKey(teamID: parts[0], keyID: parts[1], pem: pem)
        } catch {
            throw ValidationError("\(parts[2]) is not a P-256 private or public key PEM")
        }
    }

    static func parseLatency(_ text: String) throws -> SimulatorLatency {
        guard let latency = SimulatorLatency(milliseconds: text) else { throw ValidationError("--latency-ms must be N or MIN-MAX") }
        return latency
    }
}

/// Ends the service group after a fixed time (`--duration`).
private struct SimulatorDeadline: Service {
    let seconds: Double

    func run() async {
        // Returning early on shutdown is fine: the group is already stopping.
        _ = try? await cancelWhenGracefulShutdown {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
        }
    }
}
