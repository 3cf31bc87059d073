import Foundation
import PGPushTransport
import PGPushCore
import PGPushSimulator
import Synchronization
import Testing

/// `start(_:onOutcome:)`: the worker's way to keep many requests in flight without a task per request.
@Suite("APNs transport over TLS: start with a callback", .serialized, .network)
struct TransportStartTests {
    @Test(.timeLimit(.minutes(1)))
    func everyStartedRequestIsAnsweredExactlyOnceWithItsOwnOutcome() async throws {
        let key = TransportTestKey()
        let source = try key.tokenSource()
        try await TransportTest.withPool(
            simulator: TransportTest.simulatorConfiguration(key: key),
            client: { port, caFile in TransportTest.clientConfiguration(port: port, caFile: caFile) },
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
    @Test(.timeLimit(.minutes(1)))
    func anExpiredProviderTokenReachesItsSourceBeforeTheCallback() async throws {
        let key = TransportTestKey()
        // Signed two hours ago: the simulator answers 403 ExpiredProviderToken.
        let clock = ManualWallClock(Date().addingTimeInterval(-7_200))
        let source = RecordingTokenSource(try key.tokenSource(clock: clock))
        try await TransportTest.withPool(
            simulator: TransportTest.simulatorConfiguration(key: key),
            client: { port, caFile in TransportTest.clientConfiguration(port: port, caFile: caFile) },
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
