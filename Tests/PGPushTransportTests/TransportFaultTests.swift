import Foundation
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Testing

@Suite("APNs transport over TLS: GOAWAY and resets lose nothing", .serialized, .network)
struct TransportFaultTests {
    /// Every token ends with a 200; a token whose failed attempts were all reported "not processed" is in the
    /// ledger exactly once, and no token is missing from it.
    private func checkNothingLost(_ results: [String: [ProviderOutcome]], tokens: [String], simulator: APNsSimulator) {
        #expect(results.count == tokens.count)
        var unknownOutcomeTokens = 0
        for token in tokens {
            let history = results[token] ?? []
            #expect(history.last?.status == 200, "token \(DeviceToken.shortened(token)) never answered: \(history)")
            let accepted = simulator.ledger.count(forToken: token)
            #expect(accepted >= 1)
            let failures = history.compactMap { outcome -> ProviderNoResponseReason? in
                if case .noResponse(let reason) = outcome { return reason }
                return nil
            }
            if failures.allSatisfy(\.meansNotProcessed) {
                #expect(accepted == 1, "token reported not processed was accepted \(accepted) times: \(failures)")
            } else {
                unknownOutcomeTokens += 1
            }
        }
        // Duplicates may only come from attempts whose outcome was genuinely unknown.
        #expect(simulator.ledger.duplicates.count <= unknownOutcomeTokens)
    }

    @Test(.timeLimit(.minutes(2)), arguments: [SimulatorFaults.GoAwayMode.abortInFlight, .noError], TransportTest.engines)
    func goAwayMidFlightLosesNothing(mode: SimulatorFaults.GoAwayMode, engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.faults.goAwayEveryStreams = 250
        simulator.faults.goAwayMode = mode
        simulator.faults.latency = .uniform(.milliseconds(1), .milliseconds(5))
        let source = try key.tokenSource()
        let tokens = (0..<2000).map { _ in TransportTest.randomToken() }

        try await TransportTest.withPool(
            simulator: simulator,
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, connections: 2, engine: engine) },
            credentials: .token(source)
        ) { pool, simulator in
            let results = await TransportTest.sendAllUntilAnswered(pool: pool, tokens: tokens, concurrency: 400)
            checkNothingLost(results, tokens: tokens, simulator: simulator)
            #expect(simulator.statistics.goAwaysSent >= 2)
            #expect(pool.statistics.goAwaysReceived >= 2)
            #expect(pool.statistics.reconnects >= 2)
            #expect(simulator.statistics.streamLimitViolations == 0)
            if mode == .abortInFlight {
                let notProcessed = results.values.joined().filter {
                    if case .noResponse(.goAwayNotProcessed(debugReason: "Shutdown")) = $0 { return true }
                    return false
                }
                #expect(!notProcessed.isEmpty, "GOAWAY above in-flight streams must report goAwayNotProcessed with its reason")
            }
        }
    }

    @Test(.timeLimit(.minutes(2)), arguments: TransportTest.engines)
    func connectionResetLosesNothing(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.faults.resetEveryStreams = 300
        simulator.faults.latency = .uniform(.milliseconds(1), .milliseconds(5))
        let source = try key.tokenSource()
        let tokens = (0..<2000).map { _ in TransportTest.randomToken() }

        try await TransportTest.withPool(
            simulator: simulator,
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, connections: 2, engine: engine) },
            credentials: .token(source)
        ) { pool, simulator in
            let results = await TransportTest.sendAllUntilAnswered(pool: pool, tokens: tokens, concurrency: 400)
            checkNothingLost(results, tokens: tokens, simulator: simulator)
            #expect(simulator.statistics.resets >= 2)
            #expect(pool.statistics.reconnects >= 2)
            let closed = results.values.joined().filter { $0 == .noResponse(.connectionClosed) }
            #expect(!closed.isEmpty, "a reset must surface as connectionClosed for the streams in flight")
        }
    }
}
