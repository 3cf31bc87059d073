import Synchronization
import Testing

@testable import PGPushDispatcher

/// The per-app gate on its own: permits, the 429 halving and the queueing limit, without a network.
@Suite(.timeLimit(.minutes(1))) struct ConcurrencyGateTests {
    let t0 = ContinuousClock.now

    func answer(_ gate: ConcurrencyGate, count: Int, roundTrip: Duration) async {
        for _ in 0..<count {
            await gate.acquire()
            gate.release(overloaded: false, succeeded: true, roundTrip: roundTrip, now: t0)
        }
    }

    @Test func roundTripsThatShowAQueueLetFewerRequestsInFlight() async {
        let gate = ConcurrencyGate(initial: 16, maximum: 64)
        // Three windows of 64 quick answers, so that the next window is all slow ones.
        await answer(gate, count: 192, roundTrip: .milliseconds(10))
        #expect(gate.limit == 64, "quick answers grow the limit to its maximum")
        // A window of answers taking 100 ms where 22.5 ms would do (1.25 × 10 ms + 10 ms): the queue is cut.
        await answer(gate, count: 64, roundTrip: .milliseconds(100))
        #expect(gate.limit == 32)
        #expect(gate.backoffLimit == nil, "a queue is not an overload: the scheduler still claims the app in full")
    }

    @Test func aFewServiceUnavailableAnswersAmongManyDoNotShrinkTheGateButAStormDoes() async {
        let gate = ConcurrencyGate(initial: 16, maximum: 1000)
        await answer(gate, count: 3000, roundTrip: .milliseconds(10))
        #expect(gate.limit == 1000)
        // 2 % of answers are 503 for 10 seconds of traffic: APNs' noise, not its load.
        for second in 0..<10 {
            for index in 0..<1000 {
                await gate.acquire()
                let overloaded = index % 50 == 7
                gate.release(overloaded: overloaded, succeeded: !overloaded, roundTrip: .milliseconds(10),
                             now: t0 + .seconds(second) + .milliseconds(index))
            }
        }
        #expect(gate.limit == 1000, "scattered 503s leave the limit where it was")
        #expect(gate.backoffLimit == nil)
        // Then every answer is a 503: APNs sheds load, and the limit halves (once per second).
        for index in 0..<100 {
            await gate.acquire()
            gate.release(overloaded: true, succeeded: false, now: t0 + .seconds(20) + .milliseconds(index))
        }
        #expect(gate.limit == 500)
        #expect(gate.backoffLimit == 500, "the scheduler claims less of a backing-off app")
    }

    @Test func aLimitedGateHoldsTheNextRequestUntilAnAnswerFreesAPermit() async throws {
        let gate = ConcurrencyGate(initial: 16, maximum: 64)
        await answer(gate, count: 192, roundTrip: .milliseconds(10))
        await answer(gate, count: 64, roundTrip: .milliseconds(100))
        for _ in 0..<32 { await gate.acquire() }
        let admitted = Flag()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await gate.acquire()
                admitted.set()
            }
            try await Task.sleep(for: .milliseconds(100))
            #expect(!admitted.isSet, "32 in flight is the limit now")
            gate.release(overloaded: false, succeeded: true, roundTrip: .milliseconds(10), now: t0)
            try await group.waitForAll()
        }
        #expect(admitted.isSet)
    }
}

private final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .relaxed) }
    var isSet: Bool { value.load(ordering: .relaxed) }
}
