import Crypto
import Foundation
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Testing

@Suite("APNs transport over TLS: stream limits and basics", .serialized, .network)
struct TransportStreamLimitTests {
    @Test(.timeLimit(.minutes(2)), arguments: TransportTest.engines)
    func oneStreamUntilAuthenticatedThenUpToTheServerLimit(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.streamsBeforeAuth = 1
        simulator.streamsAfterAuth = 1000
        simulator.faults.latency = .fixed(.milliseconds(40))
        let source = try key.tokenSource()
        let tokens = (0..<4000).map { _ in TransportTest.randomToken() }

        try await TransportTest.withPool(
            simulator: simulator,
            client: { port, ca in
                var configuration = TransportTest.clientConfiguration(port: port, caFile: ca, engine: engine)
                // No PING may rescue a lost wakeup (slots opened before the channel was attached): it would hang
                // into the time limit instead.
                configuration.pingInterval = .seconds(3600)
                return configuration
            },
            credentials: .token(source)
        ) { pool, simulator in
            let results = await TransportTest.sendAllUntilAnswered(pool: pool, tokens: tokens, concurrency: 3000, maximumAttempts: 1)
            let statuses = results.values.compactMap(\.last).map(\.status)
            #expect(statuses.count == tokens.count)
            #expect(statuses.allSatisfy { $0 == 200 })

            let server = simulator.statistics
            #expect(server.streamLimitViolations == 0)
            #expect(server.maximumConcurrentStreamsObserved <= 1000)
            let client = pool.statistics
            #expect(client.peakStreamsPerConnection <= 1000)
            // With 40 ms latency and 3000 callers the pipe must actually fill well beyond one stream.
            #expect(client.peakStreamsPerConnection > 500)
            #expect(client.effectiveStreamLimits == [1000])
            #expect(client.requestsSent == tokens.count)
            #expect(simulator.ledger.acceptedCount == tokens.count)
        }
    }

    @Test(.timeLimit(.minutes(2)), arguments: TransportTest.engines)
    func neverExceedsALowServerLimit(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.streamsAfterAuth = 7
        simulator.faults.latency = .uniform(.milliseconds(1), .milliseconds(10))
        let source = try key.tokenSource()
        let tokens = (0..<600).map { _ in TransportTest.randomToken() }

        try await TransportTest.withPool(
            simulator: simulator,
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, connections: 2, engine: engine) },
            credentials: .token(source)
        ) { pool, simulator in
            let results = await TransportTest.sendAllUntilAnswered(pool: pool, tokens: tokens, concurrency: 200, maximumAttempts: 1)
            #expect(results.values.allSatisfy { $0.last?.status == 200 })
            #expect(simulator.statistics.streamLimitViolations == 0)
            #expect(simulator.statistics.maximumConcurrentStreamsObserved <= 7)
            #expect(pool.statistics.peakStreamsPerConnection == 7)
            // The second connection may still be handshaking on a loaded machine; at least one served.
            #expect(pool.statistics.connectionsReady >= 1)
            #expect(pool.statistics.callersWaiting == 0)
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func errorResponsesCarryReasonTimestampAndID(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        let simulator = TransportTest.simulatorConfiguration(key: key)
        let source = try key.tokenSource()
        try await TransportTest.withPool(
            simulator: simulator,
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, engine: engine) },
            credentials: .token(source)
        ) { pool, _ in
            let good = TransportTest.request(token: TransportTest.randomToken())
            guard case .response(let ok) = await pool.send(good) else {
                Issue.record("expected a response")
                return
            }
            #expect(ok.status == 200)
            #expect(ok.apnsID == good.apnsID)

            let dead = TransportTest.request(token: "dead" + String(TransportTest.randomToken().dropFirst(4)))
            guard case .response(let gone) = await pool.send(dead) else {
                Issue.record("expected a response")
                return
            }
            #expect(gone.status == 410)
            #expect(gone.reason == "Unregistered")
            #expect(gone.timestampMilliseconds != nil)
            #expect(gone.apnsID == dead.apnsID)

            let bad = TransportTest.request(token: "bad0" + String(TransportTest.randomToken().dropFirst(4)))
            let badOutcome = await pool.send(bad)
            #expect(badOutcome == .response(ProviderResponse(status: 400, reason: "BadDeviceToken", apnsID: bad.apnsID)))
        }
    }

    /// Error answers carry JSON bodies, which count against HTTP/2's 65,535-byte connection window: unless the
    /// client returns the credit, the server stalls after a couple of thousand of them.
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func errorBodiesBeyondTheInitialFlowControlWindowAllArrive(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        let simulator = TransportTest.simulatorConfiguration(key: key)
        let source = try key.tokenSource()
        try await TransportTest.withPool(
            simulator: simulator,
            client: { port, caFile in
                // One connection, so every body counts against one window; a stall shows up as timeouts.
                var configuration = TransportTest.clientConfiguration(port: port, caFile: caFile, connections: 1, engine: engine)
                configuration.requestTimeout = .seconds(15)
                return configuration
            },
            credentials: .token(source)
        ) { pool, _ in
            // {"reason":"BadDeviceToken"} is 27 bytes: 4,000 of them are ~108 KB on one connection.
            let count = 4_000
            let outcomes = await withTaskGroup(of: ProviderOutcome.self, returning: [ProviderOutcome].self) { group in
                for _ in 0..<count {
                    group.addTask {
                        await pool.send(TransportTest.request(token: "bad0" + String(TransportTest.randomToken().dropFirst(4))))
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let unexpected = outcomes.filter {
                if case .response(let response) = $0 { return !(response.status == 400 && response.reason == "BadDeviceToken") }
                return true
            }
            #expect(outcomes.count - unexpected.count == count, "first unexpected outcomes: \(unexpected.prefix(5))")
        }
    }

    /// Request bodies count against the server's 65,535-byte connection window too. The client holds a request
    /// back until the window has room for its body and opens it when the server's WINDOW_UPDATE arrives: if it
    /// lost track of the window, the held requests would never go out and would end as timeouts.
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func requestBodiesBeyondTheConnectionWindowAllGoOutIntact(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        let simulator = TransportTest.simulatorConfiguration(key: key)
        let source = try key.tokenSource()
        try await TransportTest.withPool(
            simulator: simulator,
            client: { port, caFile in
                var configuration = TransportTest.clientConfiguration(port: port, caFile: caFile, connections: 1, engine: engine)
                configuration.requestTimeout = .seconds(15)
                return configuration
            },
            credentials: .token(source)
        ) { pool, simulator in
            // 1,500 bodies of ~3.5 KB: about 80 times the initial window on one connection.
            let count = 1_500
            let alert = String(repeating: "x", count: 3_500)
            let payload = Array(#"{"aps":{"alert":"\#(alert)"}}"#.utf8)
            let tokens = (0..<count).map { _ in TransportTest.randomToken() }
            let outcomes = await withTaskGroup(of: ProviderOutcome.self, returning: [ProviderOutcome].self) { group in
                for token in tokens {
                    group.addTask {
                        await pool.send(APNsRequest(deviceToken: token, topic: TransportTest.topic, apnsID: UUID(), payload: payload))
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let failed = outcomes.filter { $0.status != 200 }
            #expect(failed.isEmpty, "first failures: \(failed.prefix(5))")
            let expectedHash = SHA256.hash(data: payload).map { String(format: "%02x", $0) }.joined()
            let ledger = simulator.ledger.entries
            #expect(ledger.count == count)
            #expect(Set(ledger.map(\.token)) == Set(tokens))
            #expect(ledger.allSatisfy { $0.payloadSHA256 == expectedHash })
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func deadlineYieldsTimeoutAndTheConnectionStaysUsable(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.faults.latency = .fixed(.seconds(6))
        let source = try key.tokenSource()
        try await TransportTest.withPool(
            simulator: simulator,
            client: { port, ca in
                var configuration = TransportTest.clientConfiguration(port: port, caFile: ca, engine: engine)
                configuration.requestTimeout = .milliseconds(300)
                return configuration
            },
            credentials: .token(source)
        ) { pool, simulator in
            let started = ContinuousClock.now
            let outcome = await pool.send(TransportTest.request(token: TransportTest.randomToken()))
            #expect(outcome == .noResponse(.timeout))
            // Well before the simulator's 6 s answer: the client's deadline ended it.
            #expect(ContinuousClock.now - started < .seconds(5))
            #expect(pool.statistics.streamsInFlight == 0)

            simulator.updateFaults { $0.latency = .none }
            let next = await pool.send(TransportTest.request(token: TransportTest.randomToken()))
            #expect(next.status == 200)
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func unreachableEndpointFailsFastWithConnectFailed(engine: HTTP2Engine) async throws {
        // Bind and release a port so nothing listens there.
        let simulator = APNsSimulator(configuration: TransportTest.simulatorConfiguration(key: nil), logger: TransportTest.logger)
        let port = try await simulator.start()
        let caFile = simulator.caCertificatePath
        await simulator.shutdown()

        let key = TransportTestKey()
        let pool = try HTTP2ConnectionPool(
            configuration: TransportTest.clientConfiguration(port: port, caFile: caFile, engine: engine),
            credentials: .token(try key.tokenSource()),
            logger: TransportTest.logger
        )
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pool.run() }
            let outcome = await pool.send(TransportTest.request(token: TransportTest.randomToken()))
            guard case .noResponse(.connectFailed) = outcome else {
                Issue.record("expected connectFailed, got \(outcome)")
                group.cancelAll()
                return
            }
            #expect(pool.statistics.connectFailures >= 1)
            group.cancelAll()
        }
    }
}
