import Foundation
import PGPushCore
import PGPushSimulator
import Testing

@Suite("FCM simulator: faults and stream limits", .timeLimit(.minutes(1)), .network)
struct FCMSimulatorFaultTests {
    typealias Harness = FCMSimulatorHarness

    @Test func quotaExceededCarriesRetryAfter() async throws {
        try await Harness.with(configure: {
            $0.faults.quotaExceededRate = 1
            $0.faults.quotaExceededRetryAfterSeconds = 7
        }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let outcome = try await harness.send(client, body: Harness.body(token: Harness.token(1)), accessToken: accessToken)
            #expect(outcome.status == 429, "\(outcome)")
            #expect(outcome.headers["retry-after"] == "7")
            let error = outcome.json?["error"] as? [String: Any]
            #expect(error?["status"] as? String == "RESOURCE_EXHAUSTED")
            let response = try #require(outcome.fcmResponse)
            #expect(response.errorCode == "QUOTA_EXCEEDED")
            #expect(response.retryAfter == .seconds(7))
            #expect(classify(response) == .retryLater(reason: "QUOTA_EXCEEDED", reconnect: false))
            // The token endpoint is not subject to per-message faults.
            #expect(harness.simulator.statistics.tokenExchangesTotal == 1)

            // Without a configured Retry-After none is sent.
            harness.simulator.updateFaults { $0.quotaExceededRetryAfterSeconds = nil }
            let bare = try await harness.send(client, body: Harness.body(token: Harness.token(2)), accessToken: accessToken)
            #expect(bare.status == 429)
            #expect(bare.headers["retry-after"] == nil)
            #expect(harness.simulator.ledger.acceptedCount == 0)
        }
    }

    @Test func unavailableOptionallyCarriesRetryAfter() async throws {
        try await Harness.with(configure: { $0.faults.unavailableRate = 1 }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let bare = try await harness.send(client, body: Harness.body(token: Harness.token(1)), accessToken: accessToken)
            #expect(bare.status == 503)
            #expect(bare.headers["retry-after"] == nil)
            #expect(bare.fcmResponse?.errorCode == "UNAVAILABLE")
            #expect((bare.json?["error"] as? [String: Any])?["status"] as? String == "UNAVAILABLE")

            harness.simulator.updateFaults { $0.unavailableRetryAfterSeconds = 3 }
            let timed = try await harness.send(client, body: Harness.body(token: Harness.token(1)), accessToken: accessToken)
            #expect(timed.status == 503)
            #expect(timed.headers["retry-after"] == "3")

            harness.simulator.updateFaults { $0.unavailableRate = 0; $0.internalErrorRate = 1 }
            let serverError = try await harness.send(client, body: Harness.body(token: Harness.token(1)), accessToken: accessToken)
            #expect(serverError.status == 500)
            #expect(serverError.fcmResponse?.errorCode == "INTERNAL")
        }
    }

    /// Faults hit a seeded fraction of requests, the same ones for the same seed, and are decided after
    /// validation and the registry (a dead token is always 404).
    @Test func faultRatesAreSeededFractions() async throws {
        func run(seed: UInt64) async throws -> [Int] {
            try await Harness.with(configure: {
                $0.faults.seed = seed
                $0.faults.quotaExceededRate = 0.3
            }) { harness in
                let client = try await harness.connect()
                defer { Task { await client.close() } }
                let accessToken = try await harness.accessToken(client)
                var statuses: [Int] = []
                for index in 0..<100 {
                    let outcome = try await harness.send(client, body: Harness.body(token: Harness.token(index)), accessToken: accessToken)
                    statuses.append(try #require(outcome.status))
                }
                let dead = try await harness.send(client, body: Harness.body(token: "dead-x"), accessToken: accessToken)
                #expect(dead.status == 404)
                #expect(harness.simulator.ledger.acceptedCount == statuses.filter { $0 == 200 }.count)
                return statuses
            }
        }
        let first = try await run(seed: 11)
        let limited = first.filter { $0 == 429 }.count
        #expect((15...45).contains(limited), "\(limited) of 100")
        #expect(Set(first) == [200, 429])
        #expect(try await run(seed: 11) == first)
    }

    @Test func goAwayEveryNStreamsLetsTheLastOnesFinish() async throws {
        try await Harness.with(configure: { $0.faults.goAwayEveryStreams = 3 }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)  // request 1, stream 1
            let second = try await harness.send(client, body: Harness.body(token: Harness.token(1)), accessToken: accessToken)
            #expect(second.status == 200)
            let third = try await harness.send(client, body: Harness.body(token: Harness.token(2)), accessToken: accessToken)
            #expect(third.status == 200)  // answered: it is within the GOAWAY's last stream id
            try await client.wait { !$0.goAways.isEmpty && $0.closed }
            let goAway = try #require(client.snapshot.goAways.first)
            #expect(goAway.errorCode == 0)
            #expect(goAway.lastStreamID == 5)
            #expect(harness.simulator.statistics.goAwaysSent == 1)
            #expect(harness.simulator.ledger.acceptedCount == 2)
        }
    }

    @Test func goAwayAbortLeavesInFlightStreamsUnanswered() async throws {
        try await Harness.with(configure: {
            $0.faults.goAwayEveryStreams = 2
            $0.faults.goAwayMode = .abortInFlight
        }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            let outcome = try await harness.send(client, body: Harness.body(token: Harness.token(1)), accessToken: accessToken)
            #expect(outcome == .connectionClosed)
            #expect(client.snapshot.goAways.first?.lastStreamID == 1)
            #expect(harness.simulator.ledger.acceptedCount == 0)
        }
    }

    @Test func resetEveryNStreamsDropsTheConnection() async throws {
        try await Harness.with(configure: { $0.faults.resetEveryStreams = 3 }) { harness in
            let client = try await harness.connect()
            let accessToken = try await harness.accessToken(client)
            #expect(try await harness.send(client, body: Harness.body(token: Harness.token(1)), accessToken: accessToken).status == 200)
            let dropped = try await harness.send(client, body: Harness.body(token: Harness.token(2)), accessToken: accessToken)
            #expect(dropped == .connectionClosed)
            #expect(client.snapshot.goAways.isEmpty)
            // A new connection carries on, with the same access token.
            let next = try await harness.connect()
            defer { Task { await next.close() } }
            #expect(try await harness.send(next, body: Harness.body(token: Harness.token(2)), accessToken: accessToken).status == 200)
            let statistics = harness.simulator.statistics
            #expect(statistics.resets == 1)
            #expect(statistics.connectionsAccepted == 2)
            #expect(harness.simulator.ledger.acceptedCount == 2)
        }
    }

    @Test func theDefaultStreamLimitIsAdvertisedAndEnforced() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            try await client.wait { !$0.maxConcurrentStreamsSettings.isEmpty }
            #expect(client.snapshot.maxConcurrentStreamsSettings == [100])
            #expect(harness.simulator.streamLimit == 100)
        }
    }

    @Test func aConfiguredLimitRefusesTheStreamBeyondIt() async throws {
        try await Harness.with(configure: { $0.maxConcurrentStreams = 3 }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            #expect(client.snapshot.maxConcurrentStreamsSettings == [3])
            // Three requests held open (no END_STREAM yet), then a fourth.
            var open: [UInt32] = []
            for index in 0..<3 {
                open.append(try client.send(path: "/v1/projects/\(Harness.projectID)/messages:send",
                                            headers: [("authorization", "Bearer \(accessToken)")],
                                            body: #"{"message":{"token":"\#(Harness.token(index))"#, endStream: false))
            }
            let fourth = try client.send(path: "/v1/projects/\(Harness.projectID)/messages:send",
                                         headers: [("authorization", "Bearer \(accessToken)")],
                                         body: Harness.body(token: Harness.token(9)))
            #expect(try await client.outcome(fourth) == .reset(code: 7))  // REFUSED_STREAM
            for id in open { client.finish(streamID: id, body: #""}}"#) }
            for id in open { #expect(try await client.outcome(id).status == 200) }
            let statistics = harness.simulator.statistics
            #expect(statistics.streamLimitViolations == 1)
            #expect(statistics.maximumConcurrentStreamsObserved == 3)
            #expect(harness.simulator.ledger.acceptedCount == 3)
        }
    }

    @Test func theStreamLimitChangesLiveOnOpenConnections() async throws {
        try await Harness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let accessToken = try await harness.accessToken(client)
            harness.simulator.updateStreamLimit(2)
            try await client.wait { $0.maxConcurrentStreamsSettings == [100, 2] }
            #expect(harness.simulator.streamLimit == 2)
            // The client acknowledged the change before these streams (the ACK left first), so it binds.
            let path = "/v1/projects/\(Harness.projectID)/messages:send"
            let held = try (0..<2).map { index in
                try client.send(path: path, headers: [("authorization", "Bearer \(accessToken)")],
                                body: #"{"message":{"token":"\#(Harness.token(index))"#, endStream: false)
            }
            let third = try client.send(path: path, headers: [("authorization", "Bearer \(accessToken)")],
                                        body: Harness.body(token: Harness.token(5)))
            #expect(try await client.outcome(third) == .reset(code: 7))
            for id in held { client.finish(streamID: id, body: #""}}"#) }
            for id in held { #expect(try await client.outcome(id).status == 200) }

            // New connections get the new limit from the start; raising it reaches them too.
            let second = try await harness.connect()
            defer { Task { await second.close() } }
            try await second.wait { !$0.maxConcurrentStreamsSettings.isEmpty }
            #expect(second.snapshot.maxConcurrentStreamsSettings == [2])
            harness.simulator.updateStreamLimit(50)
            try await second.wait { $0.maxConcurrentStreamsSettings == [2, 50] }
            try await client.wait { $0.maxConcurrentStreamsSettings == [100, 2, 50] }
            #expect(harness.simulator.statistics.streamLimitViolations == 1)
        }
    }

    @Test func latencyDelaysAnswers() async throws {
        try await Harness.with(configure: { $0.faults.latency = .fixed(.milliseconds(150)) }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let start = ContinuousClock.now
            _ = try await harness.accessToken(client)
            #expect(ContinuousClock.now - start >= .milliseconds(150))
        }
    }
}
