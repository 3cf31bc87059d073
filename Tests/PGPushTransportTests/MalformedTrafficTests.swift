import Foundation
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Testing

/// Malformed traffic in both directions: the transport given answers no APNs server sends, and the simulator
/// given requests no client should send. Every request gets an outcome; nothing hangs or crashes.
@Suite("Malformed traffic", .network)
struct MalformedTrafficTests {
    /// 2,000 requests, 30 % answered with an unknown status, a broken or huge reason body, a 20 KB header,
    /// trailers, or a DATA frame after END_STREAM.
    @Test(.timeLimit(.minutes(2)), arguments: TransportTest.engines)
    func theTransportGivesEveryRequestAnOutcomeWhateverTheServerAnswers(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.faults.malformedAnswerRate = 0.3
        let seed = UInt64.random(in: 1...UInt64.max)
        simulator.faults.seed = seed
        let source = try key.tokenSource()
        let tokens = (0..<2000).map { _ in TransportTest.randomToken() }

        try await TransportTest.withPool(
            simulator: simulator,
            client: {
                var configuration = TransportTest.clientConfiguration(port: $0, caFile: $1, connections: 2, engine: engine)
                configuration.requestTimeout = .seconds(20)
                return configuration
            },
            credentials: .token(source)
        ) { pool, simulator in
            let outcomes = await withTaskGroup(of: ProviderOutcome.self) { group in
                var outcomes: [ProviderOutcome] = []
                var next = tokens.makeIterator()
                for _ in 0..<300 {
                    guard let token = next.next() else { break }
                    group.addTask { await pool.send(TransportTest.request(token: token)) }
                }
                while let outcome = await group.next() {
                    outcomes.append(outcome)
                    if let token = next.next() { group.addTask { await pool.send(TransportTest.request(token: token)) } }
                }
                return outcomes
            }
            #expect(outcomes.count == tokens.count)
            var kinds: [String: Int] = [:]
            for outcome in outcomes {
                // Classification must accept whatever came back.
                let verdict = classify(outcome, topic: TransportTest.topic, appTopic: TransportTest.topic)
                kinds[String("\(outcome.status)/\(verdict)".prefix(60)), default: 0] += 1
            }
            print("malformed answers seed \(seed): \(kinds.sorted { $0.value > $1.value }.prefix(12))")
            #expect(outcomes.contains { $0.status == 200 }, "ordinary answers still come through")
            #expect(outcomes.contains { [299, 418, 451, 520, 999].contains($0.status) }, "unknown statuses are answers too")

            // The pool is still usable once the server behaves.
            simulator.updateFaults { $0.malformedAnswerRate = 0 }
            let after = await TransportTest.sendAllUntilAnswered(
                pool: pool, tokens: (0..<200).map { _ in TransportTest.randomToken() }, concurrency: 100)
            #expect(after.values.allSatisfy { $0.last?.status == 200 }, "\(after.values.compactMap(\.last).filter { $0.status != 200 }.prefix(3))")
        }
    }

    /// 1,500 requests no client should send: unknown methods and paths, bad and huge headers, broken JSON,
    /// oversized bodies, missing pseudo-headers, and DATA after END_STREAM. Each gets a status or a reset, and
    /// the simulator still answers a valid request at the end.
    @Test(.timeLimit(.minutes(2)))
    func theSimulatorAnswersEveryHostileRequestAndKeepsServing() async throws {
        try await SimulatorHarness.with { harness in
            var random = SystemRandomNumberGenerator()
            var statuses: [String: Int] = [:]
            var client = try await harness.connect()
            for round in 0..<1_500 {
                let token = Bool.random(using: &random) ? SimulatorHarness.token(round) : String(repeating: "z", count: Int.random(in: 0...300))
                let method = ["POST", "POST", "POST", "GET", "PUT", "DELETE", "", "P\u{7F}ST"].randomElement(using: &random)!
                let path = ["/3/device/\(token)", "/3/device/", "/", "/3/device/\(token)/extra", "/4/device/\(token)",
                            "/3/device/" + String(repeating: "%", count: 100), ""].randomElement(using: &random)!
                var headers = harness.headers()
                switch Int.random(in: 0...7, using: &random) {
                case 0: headers = []
                case 1: headers.append(("apns-expiration", ["-1", "abc", "99999999999999999999", ""].randomElement(using: &random)!))
                case 2: headers.append(("apns-priority", ["0", "11", "x", ""].randomElement(using: &random)!))
                case 3: headers.append(("apns-id", ["not-a-uuid", "", String(repeating: "a", count: 4000)].randomElement(using: &random)!))
                case 4: headers.append(("x-huge", String(repeating: "h", count: Int.random(in: 1000...12000, using: &random))))
                case 5: headers.append(("apns-push-type", ["", "bogus", "ALERT"].randomElement(using: &random)!))
                case 6: headers.append(("apns-collapse-id", String(repeating: "c", count: Int.random(in: 60...200, using: &random))))
                default: break
                }
                let body: String? = [
                    SimulatorHarness.payload, "{not json", "", "[]", #"{"aps":1}"#, nil,
                    #"{"aps":{"alert":""# + String(repeating: "b", count: Int.random(in: 4000...6000, using: &random)) + #""}}"#,
                ].randomElement(using: &random)!
                let outcome: SimulatorRawClient.Outcome
                do {
                    let stream = try client.send(method: method, path: path, headers: headers, body: body)
                    if round % 50 == 0 {
                        // A DATA frame on a stream the client already ended.
                        client.finish(streamID: stream, body: "late")
                    }
                    outcome = try await client.outcome(stream)
                } catch {
                    Issue.record("request \(round) got no outcome: \(error)")
                    return
                }
                switch outcome {
                case .response(let status, _, _): statuses["\(status)", default: 0] += 1
                case .reset(let code): statuses["reset \(code)", default: 0] += 1
                case .connectionClosed:
                    statuses["connection closed", default: 0] += 1
                    await client.close()
                    client = try await harness.connect()
                }
            }
            print("hostile requests: \(statuses.sorted { $0.value > $1.value })")
            let fresh = try await harness.connect()
            let outcome = try await fresh.request(
                path: "/3/device/\(SimulatorHarness.token(1))", headers: harness.headers(), body: SimulatorHarness.payload)
            #expect(outcome.status == 200)
            await fresh.close()
            await client.close()
        }
    }
}
