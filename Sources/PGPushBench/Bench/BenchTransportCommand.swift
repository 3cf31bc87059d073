import ArgumentParser
import Crypto
import Foundation
import Logging
import NIOPosix
import PGPushTransport
import PGPushCore
import PGPushDevelopment
import Synchronization

/// `pgpush bench transport`: sends N notifications through an ``HTTP2ConnectionPool`` and reports throughput,
/// latency percentiles, outcomes by reason and peak memory. Bounded by `--count` and `--timeout`.
struct BenchTransportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transport",
        abstract: "Send N notifications over the APNs transport and report notifications/s, latency and memory."
    )

    @Option(name: .customLong("endpoint"), help: "Base URL, e.g. https://127.0.0.1:2197 (or --stand-in nginx).")
    var endpoint: String?

    @Option(
        name: .customLong("stand-in"),
        help: "nginx: send to a throwaway nginx that answers 200 (a fresh key signs the provider tokens unless one is given)."
    )
    var standIn: APNsStandInKind?

    @Flag(name: .customLong("h2load"), help: "Run h2load (-c4 -m100, the same count) against the same endpoint first and report the ratio.")
    var h2load = false

    @Option(name: .customLong("ca-file"), help: "PEM CA file trusted in addition to the system roots (the simulator's CA).")
    var caFile: String?

    @Option(name: .customLong("topic"), help: "apns-topic (bundle id).")
    var topic: String

    @Option(name: .customLong("count"), help: "Notifications to send.")
    var count: Int = 100_000

    @Option(name: .customLong("connections"), help: "HTTP/2 connections in the pool (default 4: the worker's --connections-per-app).")
    var connections: Int = 4

    @Option(
        name: .customLong("concurrency"),
        help: "Requests in flight at once, spread over the connections (default 1000: the worker's limit per app, and one APNs connection's stream limit)."
    )
    var concurrency: Int = 1000

    @Flag(
        name: .customLong("task-per-request"),
        help: "Send each request from a task of its own that awaits the answer (pool.send), instead of starting requests with a callback (pool.start) as the worker does."
    )
    var taskPerRequest = false

    @Option(
        name: .customLong("http2-engine"),
        help: "The transport's HTTP/2 engine: nio, nghttp2, or both (one run each, nio first, against the same endpoint and h2load figure) (default: $PGPUSH_HTTP2_ENGINE, else nghttp2)."
    )
    var http2Engine: BenchHTTP2Engine?

    @Option(name: .customLong("team-id"), help: "Token auth: the 10-character team id.")
    var teamID: String?

    @Option(name: .customLong("key-id"), help: "Token auth: the 10-character key id.")
    var keyID: String?

    @Option(name: .customLong("key-file"), help: "Token auth: the .p8 private key file.")
    var keyFile: String?

    @Option(name: .customLong("certificate"), help: "Certificate auth: PEM (certificate + key) or .p12 file.")
    var certificate: String?

    @Option(
        name: .customLong("certificate-password-env"),
        help: "Name of the environment variable holding the certificate's passphrase."
    )
    var certificatePasswordEnv: String?

    @Option(name: .customLong("tokens-file"), help: "Device tokens, one per line (default: random 64-hex tokens).")
    var tokensFile: String?

    @Option(name: .customLong("timeout"), help: "Stop after this many seconds even if not all were sent.")
    var timeout: Int = 300

    @Flag(name: .customLong("json"), help: "Print the report as JSON.")
    var json = false

    @Option(name: .customLong("event-loop-threads"), help: "Event-loop threads for the pool (default: one per core).")
    var eventLoopThreads: Int?

    @Flag(name: .customLong("progress"), help: "Print pool statistics to stderr every second.")
    var progress = false

    func validate() throws {
        guard count > 0 else { throw ValidationError("--count must be positive") }
        guard (1...64).contains(connections) else { throw ValidationError("--connections must be 1…64") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        guard concurrency > 0 else { throw ValidationError("--concurrency must be positive") }
        if standIn == .simulator { throw ValidationError("--stand-in simulator: start `pgpush simulator` and pass its --endpoint") }
        if (endpoint == nil) == (standIn == nil) { throw ValidationError("give either --endpoint or --stand-in nginx") }
        if h2load {
            try H2LoadBaseline.checkInstalled()
            if certificate != nil { throw ValidationError("--h2load sends provider tokens: use token auth, not --certificate") }
        }
        let tokenAuth = teamID != nil || keyID != nil || keyFile != nil
        if standIn == .nginx, !tokenAuth, certificate == nil { return }
        if tokenAuth == (certificate != nil) {
            throw ValidationError("use either --team-id/--key-id/--key-file or --certificate")
        }
        if tokenAuth, teamID == nil || keyID == nil || keyFile == nil {
            throw ValidationError("token auth needs --team-id, --key-id and --key-file")
        }
    }

    func run() async throws {
        var logger = Logger(label: "pgpush.bench.transport")
        logger.logLevel = .warning

        let scratch = try makeTemporaryDirectory(prefix: "pgpush-bench-transport-")
        var nginx: NginxAPNsStandIn?
        defer {
            nginx?.stop()
            try? FileManager.default.removeItem(atPath: scratch)
        }
        var endpoint = self.endpoint ?? ""
        var caFile = self.caFile
        if standIn == .nginx {
            let (server, serverCA) = try NginxAPNsStandIn.start(certificateDirectory: "\(scratch)/certificates")
            nginx = server
            endpoint = server.endpoint
            caFile = serverCA
        }
        let signer = try providerTokenSigner(scratch: scratch)

        var h2loadRate: Double?
        var h2loadCPU: Double?
        if h2load, let signer {
            let result = try await H2LoadBaseline(requests: count).run(
                endpoint: endpoint, signer: signer, topic: topic, pushType: "alert",
                body: String(decoding: TransportBenchPlan.payload, as: UTF8.self))
            h2loadRate = result.requestsPerSecond
            h2loadCPU = result.cpuMicrosecondsPerRequest
            if !json { FileHandle.standardError.write(Data("h2load \(result.label): \(Int(result.requestsPerSecond)) requests/s\n".utf8)) }
        }

        let environment = ProcessInfo.processInfo.environment["PGPUSH_HTTP2_ENGINE"].flatMap(HTTP2Engine.init(rawValue:))
        let engines: [HTTP2Engine?] = http2Engine.map { $0.engines } ?? [environment]
        var reports: [TransportBenchReport] = []
        for engine in engines {
            var configuration = HTTP2ClientConfiguration(endpoint: try ProviderEndpoint(url: endpoint))
            configuration.additionalTrustRootsPEMFile = caFile
            configuration.connectionsPerPool = connections
            if let engine { configuration.http2Engine = engine }
            var report = try await measure(configuration: configuration, signer: signer, logger: logger)
            report.h2loadRequestsPerSecond = h2loadRate
            report.h2loadCPUMicrosecondsPerRequest = h2loadCPU
            report.shareOfH2Load = h2loadRate.flatMap { $0 > 0 ? report.notificationsPerSecond / $0 : nil }
            reports.append(report)
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            // One engine: the report itself, as before; both: an array of the two.
            let data = reports.count == 1 ? try encoder.encode(reports[0]) : try encoder.encode(reports)
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(reports.map(\.text).joined(separator: "\n\n"))
            if reports.count > 1 { print("\n" + Self.comparison(reports)) }
        }
    }

    /// One line per engine: its rate, its share of h2load's and its CPU per notification. (Each report's peak
    /// RSS is the process's: with both engines, the second one's includes the first run's peak.)
    static func comparison(_ reports: [TransportBenchReport]) -> String {
        reports.map { report in
            let share = report.shareOfH2Load.map { String(format: "%.2f of h2load", $0) } ?? "no h2load baseline"
            let cpu = report.cpuMicrosecondsPerNotification.map { String(format: ", %.1f µs CPU a notification", $0) } ?? ""
            let engine = report.http2Engine.padding(toLength: 8, withPad: " ", startingAt: 0)
            return engine + String(format: "%9.0f notifications/s, ", report.notificationsPerSecond) + share + cpu
        }.joined(separator: "\n")
    }

    /// One run through a fresh pool: sends `--count` notifications and reports what happened.
    private func measure(
        configuration: HTTP2ClientConfiguration, signer: ProviderTokenSigner?, logger: Logger
    ) async throws -> TransportBenchReport {
        let group: MultiThreadedEventLoopGroup =
            eventLoopThreads.map { MultiThreadedEventLoopGroup(numberOfThreads: max(1, $0)) } ?? .singleton
        let pool = try HTTP2ConnectionPool(
            configuration: configuration,
            credentials: try credentials(signer: signer),
            eventLoopGroup: group,
            logger: logger
        )
        let tokens = try loadTokens()
        // More callers than this only lengthen queues on loopback: measured on 2 cores, 1000 × connections
        // callers cut C=4 to about 70 % of what 1000 reach, with five times the latency.
        let callers = min(concurrency, count)
        let plan = TransportBenchPlan(count: count, topic: topic, tokens: tokens)

        let deadline = ContinuousClock.now + .seconds(timeout)
        let started = ContinuousClock.now
        let cpuBefore = ProcessCPUTime.ownSeconds()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await pool.run() }
            if progress {
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(1))
                        let completed = plan.tally.completed
                        FileHandle.standardError.write(Data("completed=\(completed) \(pool.statistics)\n".utf8))
                    }
                }
            }
            if taskPerRequest {
                await withDiscardingTaskGroup { workers in
                    for _ in 0..<callers {
                        workers.addTask { await plan.work(pool: pool, deadline: deadline) }
                    }
                }
            } else {
                await plan.drive(pool: pool, inFlight: callers, deadline: deadline)
            }
            group.cancelAll()
        }
        let tally = plan.tally
        let elapsed = (ContinuousClock.now - started).microseconds / 1e6
        let cpuSeconds = ProcessCPUTime.ownSeconds() - cpuBefore
        let statistics = pool.statistics
        return TransportBenchReport(
            endpoint: configuration.endpoint.description,
            http2Engine: configuration.http2Engine.rawValue,
            connections: connections,
            concurrency: callers,
            requested: count,
            completed: tally.completed,
            succeeded: tally.outcomes["200"] ?? 0,
            elapsedSeconds: elapsed,
            notificationsPerSecond: Double(tally.completed) / max(elapsed, 1e-9),
            latencyP50Milliseconds: tally.latency.percentileMilliseconds(0.50),
            latencyP99Milliseconds: tally.latency.percentileMilliseconds(0.99),
            latencyMaxMilliseconds: tally.latency.maximumMicroseconds / 1000,
            outcomes: tally.outcomes,
            peakRSSKilobytes: peakResidentKilobytes(),
            peakStreamsPerConnection: statistics.peakStreamsPerConnection,
            goAwaysReceived: statistics.goAwaysReceived,
            reconnects: statistics.reconnects,
            timedOut: tally.completed < count,
            cpuMicrosecondsPerNotification: tally.completed > 0 ? cpuSeconds * 1e6 / Double(tally.completed) : nil,
            h2loadRequestsPerSecond: nil,
            h2loadCPUMicrosecondsPerRequest: nil
        )
    }

    /// The provider-token signer of token auth: the given key, or with `--stand-in nginx` and no key a fresh one
    /// (nginx checks nothing). `nil` with certificate auth.
    private func providerTokenSigner(scratch: String) throws -> ProviderTokenSigner? {
        if let teamID, let keyID, let keyFile { return try ProviderTokenSigner(teamID: teamID, keyID: keyID, keyFile: keyFile) }
        guard certificate == nil else { return nil }
        return try ProviderTokenSigner(teamID: "BENCHTEAM1", keyID: "BENCHKEY01", privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation)
    }

    private func credentials(signer: ProviderTokenSigner?) throws -> ProviderCredentials {
        if let certificate {
            var passphrase: String?
            if let name = certificatePasswordEnv {
                guard let value = ProcessInfo.processInfo.environment[name] else {
                    throw PGPushError(.invalidConfiguration, "environment variable \(name) is not set")
                }
                passphrase = value
            }
            return .certificate(try APNsClientCertificate(file: certificate, passphrase: passphrase))
        }
        guard let signer else {
            throw PGPushError(.invalidConfiguration, "token auth needs --team-id, --key-id and --key-file")
        }
        return .token(LocalProviderTokenSource(signer: signer))
    }

    private func loadTokens() throws -> [String]? {
        guard let tokensFile else { return nil }
        guard let text = try? String(contentsOfFile: tokensFile, encoding: .utf8) else {
            throw PGPushError(.invalidConfiguration, "cannot read tokens file \(tokensFile)")
        }
        let tokens = text.split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
        guard !tokens.isEmpty else { throw PGPushError(.invalidConfiguration, "tokens file \(tokensFile) is empty") }
        return tokens
    }
}

extension HTTP2Engine: ExpressibleByArgument {}

/// `--http2-engine`: one engine, or both in one run.
enum BenchHTTP2Engine: String, ExpressibleByArgument, CaseIterable {
    case nio, nghttp2, both

    var engines: [HTTP2Engine] {
        switch self {
        case .nio: [.nio]
        case .nghttp2: [.nghttp2]
        case .both: [.nio, .nghttp2]
        }
    }
}

/// The shared work list: request i goes to token i (cycling through a tokens file, or a fresh random token).
final class TransportBenchPlan: Sendable {
    private let count: Int
    private let topic: String
    private let tokens: [String]?
    private let next = Atomic<Int>(0)
    private let shared = Mutex(TransportBenchTally())
    static let payload = Array(#"{"aps":{"alert":{"title":"pgpush","body":"transport benchmark"}}}"#.utf8)

    init(count: Int, topic: String, tokens: [String]?) {
        self.count = count
        self.topic = topic
        self.tokens = tokens
    }

    /// Everything recorded so far.
    var tally: TransportBenchTally { shared.withLock { $0 } }

    /// Keeps `inFlight` requests outstanding from one task, as the worker's chunk loop does: a request is made
    /// when a permit is free (``TransportBenchWindow``), the ready ones start together before the task waits
    /// (a ``PushOutbox``, as in the worker), and an answer, on the connection's event loop, records
    /// it and frees the permit. No task waits per request.
    func drive(pool: HTTP2ConnectionPool, inFlight: Int, deadline: ContinuousClock.Instant) async {
        var system = SystemRandomNumberGenerator()
        var generator = SplitMix64(seed: system.next())
        let window = TransportBenchWindow(limit: inFlight)
        let outbox = PushOutbox()
        while ContinuousClock.now < deadline {
            let index = next.add(1, ordering: .relaxed).oldValue
            guard index < count else { break }
            if !window.tryAcquire() {
                await outbox.send()
                await window.acquire()
            }
            let token = tokens.map { $0[index % $0.count] } ?? Self.randomToken(using: &generator)
            let request = APNsRequest(deviceToken: token, topic: topic, apnsID: Self.randomUUID(using: &generator), payload: Self.payload)
            let started = ContinuousClock.now
            await outbox.add(PushSubmission(request: request) { outcome in
                let latency = ContinuousClock.now - started
                let label = if case .response(let response) = outcome, response.status == 200 { "200" } else { Self.label(outcome) }
                self.shared.withLock { $0.record(latency, outcome: label) }
                window.release()
            }, to: pool)
        }
        await outbox.send()
        await window.waitUntilEmpty(deadline: deadline)
    }

    /// One caller: take the next index, send, record, until the count or the deadline is reached.
    /// One shared tally (not one per caller) keeps memory independent of the number of callers.
    func work(pool: HTTP2ConnectionPool, deadline: ContinuousClock.Instant) async {
        // Seeded once per caller: on Linux `UUID()` and the system generator cost a syscall per call, which
        // would be charged to the transport being measured.
        var system = SystemRandomNumberGenerator()
        var generator = SplitMix64(seed: system.next())
        while ContinuousClock.now < deadline {
            let index = next.add(1, ordering: .relaxed).oldValue
            guard index < count else { break }
            let token = tokens.map { $0[index % $0.count] } ?? Self.randomToken(using: &generator)
            let apnsID = Self.randomUUID(using: &generator)
            let request = APNsRequest(deviceToken: token, topic: topic, apnsID: apnsID, payload: Self.payload)
            let started = ContinuousClock.now
            let outcome = await pool.send(request)
            let latency = ContinuousClock.now - started
            if case .response(let response) = outcome, response.status == 200 {
                shared.withLock { $0.record(latency, outcome: "200") }
            } else {
                let label = Self.label(outcome)
                shared.withLock { $0.record(latency, outcome: label) }
            }
        }
    }

    private static func label(_ outcome: ProviderOutcome) -> String {
        switch outcome {
        case .response(let response):
            return response.reason.map { "\(response.status) \($0)" } ?? "\(response.status)"
        case .noResponse(let reason):
            switch reason {
            case .goAwayNotProcessed: return "no response: goaway not processed"
            case .refusedStream: return "no response: refused stream"
            case .connectionClosed: return "no response: connection closed"
            case .missingStatus: return "no response: missing status"
            case .timeout: return "no response: timeout"
            case .connectFailed: return "no response: connect failed"
            case .tlsRejected(let reason), .credentialRefused(let reason), .notSent(let reason): return "no response: \(reason)"
            }
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// A version-4 UUID from `generator`.
    private static func randomUUID(using generator: inout SplitMix64) -> UUID {
        var bytes = (generator.next(), generator.next())
        return withUnsafeMutableBytes(of: &bytes) { raw in
            raw[6] = (raw[6] & 0x0F) | 0x40
            raw[8] = (raw[8] & 0x3F) | 0x80
            return UUID(uuid: raw.load(as: uuid_t.self))
        }
    }

    private static func randomToken(using generator: inout SplitMix64) -> String {
        var bytes = [UInt8](repeating: 0, count: 64)
        for chunk in 0..<4 {
            var word = generator.next()
            for offset in 0..<16 {
                bytes[chunk * 16 + offset] = hexDigits[Int(word & 0xF)]
                word >>= 4
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Permits for requests in flight: `acquire` waits while `limit` are out, `release` hands a permit to the
/// waiting sender. Only the driver acquires, so at most one continuation waits.
final class TransportBenchWindow: Sendable {
    private struct State {
        var inFlight = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let limit: Int
    private let state = Mutex(State())

    init(limit: Int) { self.limit = max(1, limit) }

    /// Takes a permit if one is free now, without waiting.
    func tryAcquire() -> Bool {
        state.withLock { state in
            guard state.inFlight < limit else { return false }
            state.inFlight += 1
            return true
        }
    }

    func acquire() async {
        if tryAcquire() { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.inFlight < limit {
                    state.inFlight += 1
                    return true
                }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    func release() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter  // the permit passes to the waiter: inFlight stays
            }
            state.inFlight -= 1
            return nil
        }
        waiter?.resume()
    }

    /// Polls until every started request has been answered, or the deadline passed.
    func waitUntilEmpty(deadline: ContinuousClock.Instant) async {
        while state.withLock({ $0.inFlight }) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}
