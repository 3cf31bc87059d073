import Foundation
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Testing

@Suite("APNs pool: callers are the only queue", .network)
struct PoolBackpressureTests {
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func waitingCallersQueueAndCancellationRemovesThem(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.faults.latency = .fixed(.milliseconds(600))
        let source = try key.tokenSource()
        try await TransportTest.withPool(
            simulator: simulator,
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, engine: engine) },
            credentials: .token(source)
        ) { pool, _ in
            // Before the first success a token-auth connection has exactly one stream, so the rest must wait.
            await withTaskGroup(of: (Int, ProviderOutcome).self) { group in
                for index in 0..<6 {
                    group.addTask { (index, await pool.send(TransportTest.request(token: TransportTest.randomToken()))) }
                }
                let waitingSeen = await Self.poll { pool.statistics.callersWaiting == 5 && pool.statistics.streamsInFlight == 1 }
                #expect(waitingSeen, "expected 1 stream in flight and 5 waiting callers: \(pool.statistics)")
                var statuses: [Int] = []
                for await (_, outcome) in group { statuses.append(outcome.status) }
                #expect(statuses.count == 6)
                #expect(statuses.allSatisfy { $0 == 200 })
            }

            // Fill all 1000 streams, then cancel a caller waiting behind them: it leaves the queue at once,
            // never reaching the wire.
            do {
                let blockers = (0..<1000).map { _ in TransportTest.randomToken() }
                let cancelled = Task {
                    await withTaskGroup(of: ProviderOutcome.self) { group in
                        for token in blockers { group.addTask { await pool.send(TransportTest.request(token: token)) } }
                        var outcomes: [ProviderOutcome] = []
                        for await outcome in group { outcomes.append(outcome) }
                        return outcomes
                    }
                }
                let queued = await Self.poll { pool.statistics.streamsInFlight == 1000 }
                #expect(queued)
                let extra = Task { await pool.send(TransportTest.request(token: TransportTest.randomToken())) }
                #expect(await Self.poll { pool.statistics.callersWaiting == 1 })
                extra.cancel()
                let extraOutcome = await extra.value
                guard case .noResponse(.connectFailed) = extraOutcome else {
                    Issue.record("a cancelled waiting caller must end without being sent, got \(extraOutcome)")
                    return
                }
                #expect(pool.statistics.callersWaiting == 0)
                let outcomes = await cancelled.value
                #expect(outcomes.allSatisfy { $0.status == 200 })
            }
        }
    }

    private static func poll(_ condition: @Sendable () -> Bool) async -> Bool {
        for _ in 0..<200 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }
}
