import Foundation
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Synchronization
import Testing

/// `start(_:onOutcome:)`: the worker's way to keep many requests in flight without a task per request.
@Suite("APNs transport over TLS: start with a callback", .serialized, .network)
struct TransportStartTests {
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func everyStartedRequestIsAnsweredExactlyOnceWithItsOwnOutcome(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        let source = try key.tokenSource()
        try await TransportTest.withPool(
            simulator: TransportTest.simulatorConfiguration(key: key),
            client: { port, caFile in TransportTest.clientConfiguration(port: port, caFile: caFile, engine: engine) },
            credentials: .token(source)
        ) { pool, _ in
            // One task starts them all: it waits for stream slots, never for answers.
            let live = (0..<300).map { _ in TransportTest.randomToken() }
            let bad = (0..<100).map { _ in "bad0" + String(TransportTest.randomToken().dropFirst(4)) }
            let answers = Locked<[String: [ProviderOutcome]]>([:])
            for token in live + bad {
                await pool.start(TransportTest.request(token: token)) { outcome in
                    answers.update { $0[token, default: []].append(outcome) }
                }
            }
            let all = try await Self.waitFor(answers, count: live.count + bad.count)
            #expect(all.values.allSatisfy { $0.count == 1 })
            #expect(live.allSatisfy { all[$0]?.first?.status == 200 })
            #expect(bad.allSatisfy {
                guard case .response(let response) = all[$0]?.first else { return false }
                return response.status == 400 && response.reason == "BadDeviceToken"
            })
        }
    }

    /// A token APNs calls expired must reach its source before the caller hears the answer, or the caller's
    /// re-send would carry the same dead token.
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func anExpiredProviderTokenReachesItsSourceBeforeTheCallback(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        // Signed two hours ago: the simulator answers 403 ExpiredProviderToken.
        let clock = ManualWallClock(Date().addingTimeInterval(-7_200))
        let source = RecordingTokenSource(try key.tokenSource(clock: clock))
        try await TransportTest.withPool(
            simulator: TransportTest.simulatorConfiguration(key: key),
            client: { port, caFile in TransportTest.clientConfiguration(port: port, caFile: caFile, engine: engine) },
            credentials: .token(source)
        ) { pool, _ in
            let seen = Locked<[(ProviderOutcome, [String])]>([])
            await pool.start(TransportTest.request(token: TransportTest.randomToken())) { outcome in
                seen.update { $0.append((outcome, source.rejections)) }
            }
            let deadline = ContinuousClock.now + .seconds(20)
            while seen.value.isEmpty, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            let (outcome, rejectionsAtCallback) = try #require(seen.value.first)
            guard case .response(let response) = outcome else {
                Issue.record("expected a 403, got \(outcome)")
                return
            }
            #expect(response.status == 403 && response.reason == "ExpiredProviderToken")
            #expect(rejectionsAtCallback == ["ExpiredProviderToken"])
        }
    }

    /// A batch larger than the server's stream limit: the requests that get slots go out together, the rest
    /// wait for slots one by one; each is answered once, and the limit is never exceeded.
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func aBatchLargerThanTheFreeSlotsIsAnsweredExactlyOnceWithinTheServersLimit(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.streamsAfterAuth = 7
        simulator.faults.latency = .uniform(.milliseconds(1), .milliseconds(10))
        try await TransportTest.withPool(
            simulator: simulator,
            client: { TransportTest.clientConfiguration(port: $0, caFile: $1, connections: 2, engine: engine) },
            credentials: .token(try key.tokenSource())
        ) { pool, simulator in
            // The first request proves the token, so the batches below see the full limit.
            _ = await pool.send(TransportTest.request(token: TransportTest.randomToken()))
            let live = (0..<150).map { _ in TransportTest.randomToken() }
            let bad = (0..<50).map { _ in "bad0" + String(TransportTest.randomToken().dropFirst(4)) }
            let answers = Locked<[String: [ProviderOutcome]]>([:])
            let tokens = live + bad
            for start in stride(from: 0, to: tokens.count, by: 40) {
                await pool.start(tokens[start..<min(start + 40, tokens.count)].map { token in
                    PushSubmission(request: TransportTest.request(token: token)) { outcome in
                        answers.update { $0[token, default: []].append(outcome) }
                    }
                })
            }
            let all = try await Self.waitFor(answers, count: live.count + bad.count)
            #expect(all.count == live.count + bad.count)
            #expect(all.values.allSatisfy { $0.count == 1 })
            #expect(live.allSatisfy { all[$0]?.first?.status == 200 })
            #expect(bad.allSatisfy {
                guard case .response(let response) = all[$0]?.first else { return false }
                return response.status == 400 && response.reason == "BadDeviceToken"
            })
            #expect(simulator.statistics.streamLimitViolations == 0)
            #expect(simulator.statistics.maximumConcurrentStreamsObserved <= 7)
            #expect(pool.statistics.callersWaiting == 0)
            #expect(simulator.ledger.acceptedCount == live.count + 1)
        }
    }

    /// In a batch as alone: each rejection of the token reaches its source before the caller hears the answer.
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func aBatchReportsEachExpiredProviderTokenToItsSourceBeforeTheCallback(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        let source = RecordingTokenSource(try key.tokenSource())
        // The simulator's clock moves on after the first answer: the token the pool holds becomes two hours old.
        let simulatorClock = ManualWallClock(Date())
        var simulator = TransportTest.simulatorConfiguration(key: key)
        simulator.now = { simulatorClock.now() }
        try await TransportTest.withPool(
            simulator: simulator,
            client: { port, caFile in TransportTest.clientConfiguration(port: port, caFile: caFile, engine: engine) },
            credentials: .token(source)
        ) { pool, _ in
            // A first success lifts the single stream a token starts with, so the batch leaves in one piece.
            #expect(await pool.send(TransportTest.request(token: TransportTest.randomToken())).status == 200)
            simulatorClock.advance(by: 7_200)
            let seen = Locked<[(ProviderOutcome, Int)]>([])
            let batch = (0..<5).map { _ in
                PushSubmission(request: TransportTest.request(token: TransportTest.randomToken())) { outcome in
                    seen.update { $0.append((outcome, source.rejections.count)) }
                }
            }
            await pool.start(batch)
            let deadline = ContinuousClock.now + .seconds(20)
            while seen.value.count < batch.count, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(seen.value.count == batch.count)
            for (index, (outcome, rejectionsAtCallback)) in seen.value.enumerated() {
                guard case .response(let response) = outcome else {
                    Issue.record("expected a 403, got \(outcome)")
                    continue
                }
                #expect(response.status == 403 && response.reason == "ExpiredProviderToken")
                // The n-th answer heard comes after the n-th rejection reached the source.
                #expect(rejectionsAtCallback >= index + 1)
            }
        }
    }

    private static func waitFor(
        _ answers: Locked<[String: [ProviderOutcome]]>, count: Int
    ) async throws -> [String: [ProviderOutcome]] {
        let deadline = ContinuousClock.now + .seconds(30)
        while answers.value.values.reduce(0, { $0 + $1.count }) < count, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        // A moment more: a second answer for any request would show up here.
        try await Task.sleep(for: .milliseconds(200))
        return answers.value
    }
}

/// A value the callbacks (on the event loops) and the test share.
private final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    var value: Value { mutex.withLock { $0 } }
    func update(_ body: (inout Value) -> Void) { mutex.withLock { body(&$0) } }
}

/// Passes tokens through and remembers which rejections it was told of.
private final class RecordingTokenSource: ProviderTokenSource {
    private let base: LocalProviderTokenSource
    private let recorded = Mutex<[String]>([])

    init(_ base: LocalProviderTokenSource) {
        self.base = base
    }

    var rejections: [String] { recorded.withLock { $0 } }

    func currentToken() async throws -> ProviderToken {
        try await base.currentToken()
    }

    func reportRejected(_ token: ProviderToken, reason: String) async {
        recorded.withLock { $0.append(reason) }
        await base.reportRejected(token, reason: reason)
    }
}
