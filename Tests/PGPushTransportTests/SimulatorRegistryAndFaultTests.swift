import Foundation
import PGPushSimulator
import Testing

@Suite("APNs simulator: registry and faults", .network)
struct SimulatorRegistryAndFaultTests {
    let body = SimulatorHarness.payload

    @Test(.timeLimit(.minutes(1)))
    func registryOutcomes() async throws {
        let explicitDead = SimulatorHarness.token(21)
        let foreign = SimulatorHarness.token(22)
        try await SimulatorHarness.with(configure: {
            $0.registry.unregistered[explicitDead] = 1_700_000_000_000
            $0.registry.tokenTopics[foreign] = "com.example.other"
        }) { harness in
            let client = try await harness.connect()
            func send(_ token: String) async throws -> SimulatorRawClient.Outcome {
                try await client.request(path: "/3/device/\(token)", headers: harness.headers(), body: body)
            }
            let dead = try await send(SimulatorHarness.token(1, prefix: "dead"))
            #expect(dead.status == 410)
            #expect(dead.reason == "Unregistered")
            let expected = Int64((harness.clock.now.timeIntervalSince1970 - 86_400) * 1000)
            #expect(abs((dead.timestamp ?? 0) - expected) < 1000)

            let listed = try await send(explicitDead)
            #expect(listed.status == 410)
            #expect(listed.timestamp == 1_700_000_000_000)

            let bad = try await send(SimulatorHarness.token(2, prefix: "bad0"))
            #expect(bad.status == 400)
            #expect(bad.reason == "BadDeviceToken")

            #expect(try await send(SimulatorHarness.token(3, prefix: "0e0e")).reason == "DeviceTokenNotForTopic")
            #expect(try await send(foreign).reason == "DeviceTokenNotForTopic")
            #expect(harness.simulator.ledger.acceptedCount == 0)
            await client.close()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func wrongEnvironmentCanBeFixedMidRun() async throws {
        try await SimulatorHarness.with(configure: { $0.registry.badDeviceTokenByDefault = true }) { harness in
            let client = try await harness.connect()
            let path = "/3/device/" + SimulatorHarness.token(5)
            #expect(try await client.request(path: path, headers: harness.headers(), body: body).reason == "BadDeviceToken")
            harness.simulator.updateRegistry { $0.badDeviceTokenByDefault = false }
            #expect(try await client.request(path: path, headers: harness.headers(), body: body).status == 200)
            await client.close()
        }
    }

    /// Sends one request per token (plus a retry of each) and returns the statuses.
    private func faultRun(seed: UInt64) async throws -> [Int] {
        try await SimulatorHarness.with(configure: {
            $0.faults.seed = seed
            $0.faults.serverErrorRate = 0.3
            $0.faults.tooManyRequestsTokenFraction = 0.3
            $0.faults.tooManyRequestsFirstAttempts = 1
        }) { harness in
            let client = try await harness.connect()
            var statuses: [Int] = []
            for round in 0..<2 {
                for index in 0..<40 {
                    let outcome = try await client.request(
                        path: "/3/device/\(SimulatorHarness.token(index))", headers: harness.headers(), body: body)
                    statuses.append(outcome.status ?? -1)
                    if round == 1 { #expect(outcome.reason != "TooManyRequests") }
                }
            }
            await client.close()
            return statuses
        }
    }

    @Test(.timeLimit(.minutes(2)))
    func faultsAreDeterministicPerSeed() async throws {
        let first = try await faultRun(seed: 42)
        let again = try await faultRun(seed: 42)
        let other = try await faultRun(seed: 43)
        #expect(first == again)
        #expect(first != other)
        #expect(first.contains(429))
        #expect(first.contains(500) || first.contains(503))
        #expect(first.contains(200))
    }

    @Test(.timeLimit(.minutes(1)))
    func gracefulGoAwayLetsInFlightFinish() async throws {
        try await SimulatorHarness.with(configure: { $0.faults.goAwayEveryStreams = 3 }) { harness in
            let client = try await harness.connect()
            var ids: [UInt32] = []
            for index in 0..<3 {
                let id = try client.send(path: "/3/device/\(SimulatorHarness.token(index))", headers: harness.headers(), body: body)
                let outcome = try await client.outcome(id)
                #expect(outcome.status == 200, "\(outcome)")
                ids.append(id)
            }
            try await client.wait { $0.closed }
            let goAways = client.snapshot.goAways
            #expect(goAways.count == 1)
            #expect(goAways.first?.errorCode == 0)
            #expect(goAways.first?.lastStreamID == ids.last)
            #expect(harness.simulator.statistics.goAwaysSent == 1)
            #expect(harness.simulator.ledger.acceptedCount == 3)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func abortingGoAwayDropsInFlightStreams() async throws {
        try await SimulatorHarness.with(configure: {
            $0.faults.goAwayEveryStreams = 2
            $0.faults.goAwayMode = .abortInFlight
        }) { harness in
            let client = try await harness.connect()
            let first = try client.send(path: "/3/device/\(SimulatorHarness.token(1))", headers: harness.headers(), body: body)
            #expect(try await client.outcome(first).status == 200)
            try await client.wait { $0.maxConcurrentStreamsSettings.count == 2 }
            let pending = try client.send(path: "/3/device/\(SimulatorHarness.token(2))", headers: harness.headers(),
                                          body: nil, endStream: false)
            let trigger = try client.send(path: "/3/device/\(SimulatorHarness.token(3))", headers: harness.headers(), body: body)
            #expect(try await client.outcome(trigger) == .connectionClosed)
            #expect(try await client.outcome(pending) == .connectionClosed)
            let goAway = try #require(client.snapshot.goAways.first)
            #expect(goAway.lastStreamID == first)
            #expect(goAway.lastStreamID < pending)
            #expect(goAway.debugData == #"{"reason":"Shutdown"}"#)
            #expect(harness.simulator.ledger.acceptedCount == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func resetFaultClosesTheConnectionUnanswered() async throws {
        try await SimulatorHarness.with(configure: { $0.faults.resetEveryStreams = 2 }) { harness in
            let client = try await harness.connect()
            #expect(try await client.request(path: "/3/device/\(SimulatorHarness.token(1))", headers: harness.headers(),
                                             body: body).status == 200)
            let dropped = try await client.request(path: "/3/device/\(SimulatorHarness.token(2))",
                                                   headers: harness.headers(), body: body)
            #expect(dropped == .connectionClosed)
            #expect(client.snapshot.goAways.isEmpty)
            #expect(harness.simulator.statistics.resets == 1)
            #expect(harness.simulator.ledger.acceptedCount == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func fixedLatencyDelaysAnswers() async throws {
        try await SimulatorHarness.with(configure: { $0.faults.latency = .fixed(.milliseconds(150)) }) { harness in
            let client = try await harness.connect()
            let start = ContinuousClock.now
            #expect(try await client.request(path: "/3/device/\(SimulatorHarness.token(1))", headers: harness.headers(),
                                             body: body).status == 200)
            #expect(ContinuousClock.now - start >= .milliseconds(150))
            await client.close()
        }
    }
}
