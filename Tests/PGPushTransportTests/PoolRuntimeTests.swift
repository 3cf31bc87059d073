import Logging
import PGPushCore
import Synchronization
import Testing

@testable import PGPushTransport

/// ``HTTP2ConnectionPool`` itself, run with a ``FakeConnectionFactory`` and a ``TestClock``: its timers
/// (connect timeout, back-off, PING, drain) fire when the test moves the clock. No socket, no sleep.
@Suite("HTTP/2 pool runtime: timers on a test clock")
struct PoolRuntimeTests {
    /// Connect timeout 5 s, stable after 10 s, back-off n s after n failures, PING every 30 s with 10 s to
    /// answer, drain 16 s.
    static var timing: HTTP2PoolStateMachine.Timing {
        var timing = HTTP2PoolStateMachine.Timing()
        timing.connectTimeout = .seconds(5)
        timing.stableLifetime = .seconds(10)
        timing.pingInterval = .seconds(30)
        timing.pingTimeout = .seconds(10)
        timing.drainTimeout = .seconds(16)
        timing.backoff = { .seconds($0) }
        return timing
    }

    private func makePool(
        _ factory: FakeConnectionFactory, clock: TestClock, connections: Int = 1, handled: HandledTimers = HandledTimers()
    ) -> HTTP2ConnectionPool {
        var configuration = HTTP2ClientConfiguration()
        configuration.connectionsPerPool = connections
        return HTTP2ConnectionPool(
            configuration: configuration, credentials: .none, factory: factory, clock: clock, timing: Self.timing,
            logger: Logger(label: "pool-runtime-test"), onTimerHandled: { handled.record($0) })
    }

    /// Runs the pool while `body` plays the test, then shuts it down gracefully unless `body` did, and waits
    /// for its run to end.
    private func running(_ pool: HTTP2ConnectionPool, _ body: () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pool.run() }
            try await body()
            pool.beginShutdown()
            try await group.waitForAll()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func connectTimeoutFailsTheAttemptAndSchedulesABackoff() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory([.silent])
        let pool = makePool(factory, clock: clock)
        try await running(pool) {
            let silent = try #require(await factory.attempt(1))
            // Attached: the connect timeout (5 s) and the stable lifetime (10 s) run.
            await clock.waitForDeadlines([.seconds(5), .seconds(10)])
            clock.advance(by: .seconds(5))
            await silent.waitUntilClosed()
            // Only the back-off is left: 1 s after the first failure.
            await clock.waitForDeadlines([.seconds(6)])
            #expect(pool.statistics.connectFailures == 1)
            #expect(await pool.send(FakeRequest()) == .noResponse(.connectFailed(detail: "no HTTP/2 SETTINGS within the connect timeout")))
            clock.advance(by: .seconds(1))
            let second = try #require(await factory.attempt(2))
            await clock.waitForDeadlines([.seconds(16), .seconds(36)])  // stable lifetime, PING interval
            #expect(pool.statistics.reconnects == 1)
            #expect(pool.statistics.connectionsReady == 1)
            #expect(!second.snapshot.isClosed)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func backoffGrowsWithFailuresAndResetsAfterAStableConnection() async throws {
        let refused = HTTP2ConnectFailure(detail: "connection refused")
        let clock = TestClock()
        let factory = FakeConnectionFactory([.fail(refused), .fail(refused), .ready(maxConcurrentStreams: 10), .fail(refused)])
        let handled = HandledTimers()
        let pool = makePool(factory, clock: clock, handled: handled)
        try await running(pool) {
            _ = await factory.attempt(1)
            await clock.waitForDeadlines([.seconds(1)])
            clock.advance(by: .seconds(1))
            _ = await factory.attempt(2)
            await clock.waitForDeadlines([.seconds(3)])  // 2 s after the second failure
            clock.advance(by: .seconds(2))
            let ready = try #require(await factory.attempt(3))
            await clock.waitForDeadlines([.seconds(13), .seconds(33)])  // stable lifetime, PING interval
            clock.advance(by: .seconds(10))
            await handled.wait(for: .stableLifetime(ready.id))
            // The server closes the connection that lived past its stable lifetime: the replacement opens at
            // once, and its failure backs off 1 s, as after a first failure.
            ready.close()
            _ = await factory.attempt(4)
            await clock.waitForDeadlines([.seconds(14)])
            #expect(pool.statistics.connectFailures == 3)
            #expect(pool.statistics.reconnects == 3)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aConnectionThatDiesYoungIsReplacedAfterABackoff() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory()
        let pool = makePool(factory, clock: clock)
        try await running(pool) {
            let first = try #require(await factory.attempt(1))
            await clock.waitForDeadlines([.seconds(10), .seconds(30)])
            first.close()
            await clock.waitForDeadlines([.seconds(1)])
            #expect(factory.attemptCount == 1)
            clock.advance(by: .seconds(1))
            _ = await factory.attempt(2)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func unansweredPingClosesTheConnection() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory()
        let handled = HandledTimers()
        let pool = makePool(factory, clock: clock, handled: handled)
        try await running(pool) {
            let first = try #require(await factory.attempt(1))
            await clock.waitForDeadlines([.seconds(10), .seconds(30)])
            clock.advance(by: .seconds(30))
            await first.waitUntil { $0.pings == [1] }
            await handled.wait(for: .stableLifetime(first.id))
            await clock.waitForDeadlines([.seconds(40), .seconds(60)])  // PING timeout, next PING
            clock.advance(by: .seconds(10))
            await first.waitUntilClosed()
            // It lived past its stable lifetime: replaced at once.
            let second = try #require(await factory.attempt(2))
            await clock.waitForDeadlines([.seconds(50), .seconds(70)])
            #expect(!second.snapshot.isClosed)
            #expect(pool.statistics.reconnects == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func answeredPingCancelsItsTimeout() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory(answersPings: true)
        let pool = makePool(factory, clock: clock)
        try await running(pool) {
            let connection = try #require(await factory.attempt(1))
            await clock.waitForDeadlines([.seconds(10), .seconds(30)])
            clock.advance(by: .seconds(30))
            // The ACK came at once: only the next PING is due.
            await clock.waitForDeadlines([.seconds(60)])
            clock.advance(by: .seconds(30))
            await connection.waitUntil { $0.pings == [1, 2] }
            await clock.waitForDeadlines([.seconds(90)])
            #expect(!connection.snapshot.isClosed)
            #expect(factory.attemptCount == 1)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func drainEndsWhenTheInFlightStreamsEnd() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory()
        let pool = makePool(factory, clock: clock)
        let outcome = Mutex<ProviderOutcome?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pool.run() }
            let connection = try #require(await factory.attempt(1))
            await pool.start(FakeRequest()) { result in outcome.withLock { $0 = result } }
            await connection.waitUntil { $0.open == 1 }
            pool.beginShutdown()
            await clock.waitUntil { $0.contains(.seconds(16)) }  // the drain deadline
            #expect(!connection.snapshot.isClosed)
            #expect(await pool.send(FakeRequest()) == .noResponse(HTTP2PoolStateMachine.shutDownReason))
            connection.answerOldest(status: 200)
            try await group.waitForAll()
            #expect(connection.snapshot.isClosed)
        }
        #expect(outcome.withLock { $0 } == .response(ProviderResponse(status: 200)))
        #expect(clock.now.offset == .zero)
        #expect(clock.deadlines == [], "the drain deadline, the PING and the stable lifetime were cancelled")
    }

    @Test(.timeLimit(.minutes(1)))
    func drainIsBoundedByItsDeadline() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory()
        let pool = makePool(factory, clock: clock)
        let outcome = Mutex<ProviderOutcome?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pool.run() }
            let connection = try #require(await factory.attempt(1))
            await pool.start(FakeRequest()) { result in outcome.withLock { $0 = result } }
            await connection.waitUntil { $0.open == 1 }
            pool.beginShutdown()
            await clock.waitUntil { $0.contains(.seconds(16)) }
            clock.advance(by: .seconds(16))
            try await group.waitForAll()
            #expect(connection.snapshot.isClosed)
        }
        #expect(outcome.withLock { $0 } == .noResponse(.connectionClosed))
        #expect(clock.deadlines == [])
    }

    @Test(.timeLimit(.minutes(1)))
    func shutdownCancelsEveryTimer() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory([.ready(maxConcurrentStreams: 10), .fail(HTTP2ConnectFailure(detail: "refused"))])
        let pool = makePool(factory, clock: clock, connections: 2)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pool.run() }
            let ready = try #require(await factory.attempt(1))
            _ = await factory.attempt(2)
            // The back-off of the failed slot, the ready connection's stable lifetime and PING.
            await clock.waitForDeadlines([.seconds(1), .seconds(10), .seconds(30)])
            pool.beginShutdown()
            try await group.waitForAll()
            #expect(ready.snapshot.isClosed)
        }
        #expect(clock.deadlines == [])
        #expect(clock.now.offset == .zero)
        #expect(factory.attemptCount == 2)
    }

    @Test(.timeLimit(.minutes(1)))
    func cancellingTheRunClosesEveryConnection() async throws {
        let clock = TestClock()
        let factory = FakeConnectionFactory()
        let pool = makePool(factory, clock: clock, connections: 2)
        let outcome = Mutex<ProviderOutcome?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pool.run() }
            let first = try #require(await factory.attempt(1))
            let second = try #require(await factory.attempt(2))
            await clock.waitUntil { $0.count == 4 }
            await pool.start(FakeRequest()) { result in outcome.withLock { $0 = result } }
            group.cancelAll()
            try await group.waitForAll()
            #expect(first.snapshot.isClosed && second.snapshot.isClosed)
        }
        #expect(outcome.withLock { $0 } == .noResponse(.connectionClosed))
        #expect(clock.deadlines == [])
    }
}
