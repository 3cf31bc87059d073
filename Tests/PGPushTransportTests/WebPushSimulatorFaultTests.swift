import Foundation
import PGPushCore
import PGPushSimulator
import Testing

@Suite("Web Push simulator: faults", .timeLimit(.minutes(2)), .network)
struct WebPushSimulatorFaultTests {
    typealias Harness = WebPushSimulatorHarness

    @Test(arguments: [false, true])
    func eachFaultStatus(http1: Bool) async throws {
        try await Harness.with(http1OnlyClient: http1, configure: {
            $0.faults.tooManyRequestsRate = 1
            $0.faults.tooManyRequestsRetryAfterSeconds = 7
        }) { harness in
            let subscription = try harness.subscribe()
            let tooMany = try await harness.push("x", to: subscription)
            #expect(tooMany.status == 429)
            #expect(tooMany.reason == "TooManyRequests")
            #expect(tooMany.headers["retry-after"] == "7")

            harness.simulator.updateFaults { $0.tooManyRequestsRate = 0; $0.serviceUnavailableRate = 1 }
            let unavailable = try await harness.push("x", to: subscription)
            #expect(unavailable.status == 503)
            #expect(unavailable.headers["retry-after"] == nil)
            harness.simulator.updateFaults { $0.serviceUnavailableRetryAfterSeconds = 3 }
            #expect(try await harness.push("x", to: subscription).headers["retry-after"] == "3")

            harness.simulator.updateFaults { $0.serviceUnavailableRate = 0; $0.internalErrorRate = 1 }
            let serverError = try await harness.push("x", to: subscription)
            #expect(serverError.status == 500)
            #expect(serverError.reason == "InternalServerError")

            // Faults come after the subscription and VAPID checks: a gone subscription is still 410.
            let gone = try harness.subscribe(outcome: .gone)
            #expect(try await harness.push("x", to: gone).status == 410)

            harness.simulator.updateFaults { $0.internalErrorRate = 0 }
            #expect(try await harness.push("x", to: subscription).status == 201)
            #expect(harness.simulator.ledger.acceptedCount == 1)
        }
    }

    /// 10 % 429 and 10 % 503 over 400 pushes land near their shares, and every subscription is accepted exactly
    /// once when the sender retries what was refused.
    @Test func faultSharesAndRetries() async throws {
        try await Harness.with(configure: {
            $0.faults.seed = 42
            $0.faults.tooManyRequestsRate = 0.1
            $0.faults.serviceUnavailableRate = 0.1
        }) { harness in
            let subscriptions = try harness.simulator.makeSubscriptions(count: 400)
            var pending = subscriptions
            var firstRound: [Int] = []
            for round in 0..<20 where !pending.isEmpty {
                var refused: [WebPushSimulatorSubscription] = []
                for subscription in pending {
                    let outcome = try await harness.push("job-1", to: subscription)
                    if round == 0 { firstRound.append(outcome.status) }
                    if outcome.status != 201 {
                        #expect([429, 503].contains(outcome.status))
                        refused.append(subscription)
                    }
                }
                pending = refused
            }
            #expect(pending.isEmpty)
            let tooMany = firstRound.filter { $0 == 429 }.count
            let unavailable = firstRound.filter { $0 == 503 }.count
            // Expected 40 each (the 503 draw sees only what the 429 draw let through: 36).
            #expect((20...65).contains(tooMany), "429s: \(tooMany)")
            #expect((15...60).contains(unavailable), "503s: \(unavailable)")
            let ledger = harness.simulator.ledger
            #expect(ledger.acceptedCount == 400)
            #expect(ledger.duplicates.isEmpty)
            #expect(ledger.duplicateMessages == 0)
            #expect(harness.simulator.statistics.count(status: 429) >= tooMany)
        }
    }

    @Test(arguments: [false, true])
    func resetDropsTheConnection(http1: Bool) async throws {
        try await Harness.with(http1OnlyClient: http1, configure: { $0.faults.resetEveryStreams = 2 }) { harness in
            let subscription = try harness.subscribe()
            #expect(try await harness.push("one", to: subscription).status == 201)
            await #expect(throws: (any Error).self) { _ = try await harness.push("two", to: subscription) }
            // The client may still hand the next request to the dropped connection before it sees the close:
            // retry as a sender would.
            var third: Harness.Outcome?
            for _ in 0..<5 where third == nil {
                third = try? await harness.push("three", to: subscription)
            }
            #expect(third?.status == 201)
            #expect(harness.simulator.statistics.resets == 1)
            #expect(harness.simulator.ledger.plaintexts(forSubscription: subscription.id) == ["one", "three"])
        }
    }

    /// A GOAWAY (HTTP/2) or Connection: close (HTTP/1.1) after an answer: the client carries on over a new
    /// connection.
    @Test(arguments: [false, true])
    func goAwayMovesTheClientToANewConnection(http1: Bool) async throws {
        try await Harness.with(http1OnlyClient: http1, configure: { $0.faults.goAwayEveryStreams = 2 }) { harness in
            let subscription = try harness.subscribe()
            for index in 0..<4 {
                let outcome = try await harness.push("m\(index)", to: subscription)
                #expect(outcome.status == 201)
                if http1 && index == 1 { #expect(outcome.headers["connection"] == "close") }
            }
            let statistics = harness.simulator.statistics
            #expect(statistics.goAwaysSent == 2)
            #expect(statistics.connectionsAccepted >= 2)
            #expect(harness.simulator.ledger.acceptedCount == 4)
        }
    }

    @Test func latencyDelaysAnswers() async throws {
        try await Harness.with(http1OnlyClient: true, configure: { $0.faults.latency = .fixed(.milliseconds(150)) }) { harness in
            let subscription = try harness.subscribe()
            _ = try await harness.push("warm-up", to: subscription)
            let start = ContinuousClock.now
            #expect(try await harness.push("slow", to: subscription).status == 201)
            #expect(ContinuousClock.now - start >= .milliseconds(150))
        }
    }
}
