import ArgumentParser
import Foundation
import Logging
import PGPushSimulator
import ServiceLifecycle

/// `pgpush simulator`: APNs on loopback, for demos, benchmarks and clients in other processes.
struct SimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulator",
        abstract: "Run an APNs simulator (HTTP/2 over TLS) with fault injection and a ledger.",
        discussion: """
            Behaves like APNs: request validation with APNs' reasons, provider-token checks, one stream until the
            first success and then 1000, and the device-token prefix rules dead… (410 Unregistered), bad0…
            (BadDeviceToken) and 0e0e… (DeviceTokenNotForTopic). Clients must trust <cert-dir>/ca.pem and
            connect to "localhost" or 127.0.0.1.

            Examples:
              pgpush simulator --token-key TEAM123456:KEY1234567:AuthKey.p8 --topic com.example.app
              pgpush simulator --token-key T:K:key.p8 --error-rate 0.01 --goaway-every 5000 --seed 7 --duration 60

            Prints the port and CA path on start and the ledger summary on exit (SIGINT/SIGTERM or --duration).
            Clients that reach it by another name (a compose service, say) need --certificate-hostname NAME.
            """)

    @OptionGroup var logging: LoggingOptions

    @Option(help: "Address to bind.") var host = "127.0.0.1"
    @Option(help: "Port to bind (0 picks a free one).") var port = 2197
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
    @Option(help: "Stop by itself after this many seconds.") var duration: Double?

    func run() async throws {
        let logger = logging.bootstrap(label: "pgpush.simulator")
        let configuration = try makeConfiguration()
        let simulator = APNsSimulator(configuration: configuration, logger: logger)
        let boundPort = try await simulator.start()
        // Written unbuffered: scripts wait for these lines to learn the port.
        Self.say("pgpush simulator: listening on \(host):\(boundPort)")
        Self.say("pgpush simulator: CA certificate \(simulator.caCertificatePath)")

        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: simulator)]
        if let duration {
            services.append(.init(service: SimulatorDeadline(seconds: duration),
                                  successTerminationBehavior: .gracefullyShutdownGroup))
        }
        var groupConfiguration = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], cancellationSignals: [], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(10)
        try await ServiceGroup(configuration: groupConfiguration).run()
        await simulator.shutdown()
        Self.say("pgpush simulator: \(simulator.summary)")
    }

    private static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    private func makeConfiguration() throws -> APNsSimulatorConfiguration {
        var configuration = APNsSimulatorConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.certificateDirectory = certDir
        configuration.regenerateCertificates = regenerateCerts
        configuration.certificateHostnames = certificateHostname
        configuration.tokenKeys = try tokenKey.map(Self.parseTokenKey)
        configuration.clientCertificateCAFile = clientCA
        configuration.certificateTopics = certificateTopic
        configuration.allowedTopics = topic.isEmpty ? nil : Set(topic)
        configuration.registry.badDeviceTokenByDefault = badDeviceTokenByDefault
        configuration.ledgerFile = ledgerFile
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
        let bounds = text.split(separator: "-").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        switch bounds.count {
        case 1 where bounds[0] != nil:
            return bounds[0]! == 0 ? .none : .fixed(.milliseconds(bounds[0]!))
        case 2 where bounds[0] != nil && bounds[1] != nil && bounds[0]! <= bounds[1]!:
            return .uniform(.milliseconds(bounds[0]!), .milliseconds(bounds[1]!))
        default:
            throw ValidationError("--latency-ms must be N or MIN-MAX")
        }
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
