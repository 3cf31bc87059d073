import Foundation
import Logging
import PGPushCore
@testable import PGPushDispatcher
import PGPushDispatcherTesting
import PGPushStore
import Synchronization

/// One app with a fake pool, a chunk processor on the in-memory store and a test clock, and the worker's shared
/// verdicts, app health and lifecycle (its shutdown state): everything `ChunkProcessor.process` touches, with no database,
/// socket or sleep.
struct ChunkHarness {
    static let appID = "app"
    let clock = TestClock()
    let store: InMemoryWorkerStore
    let senders = FakeAppSenders()
    let pool: FakePushPool
    let appHealth = AppHealth(threshold: 3)
    var verdicts = JobVerdicts()
    let lifecycle = WorkerLifecycle()
    let app = AppRecord(id: ChunkHarness.appID, topic: "com.example.app", environment: "production")
    var retryPolicy = RetryPolicy()
    var maximumClaims = 5
    /// The backoff's random draws: `.max` takes the whole jitter window, 0 none of it.
    var random: WorkerRuntimeRandom = SeededRandom.constant(.max)

    init(answer: @escaping @Sendable (FakePushPool.Request) -> FakePushPool.Answer = { _ in .now(.ok) }) {
        store = InMemoryWorkerStore(clock: clock)
        pool = FakePushPool(clock: clock, answer: answer)
        store.addApp(app)
        senders.add(app, pool: pool)
    }

    var sender: AppSender { senders.sender(of: Self.appID)! }

    func processor() -> ChunkProcessor {
        ChunkProcessor(
            maximumClaims: maximumClaims, retryPolicy: retryPolicy, store: store, registry: senders, appHealth: appHealth,
            metrics: WorkerMetrics(), logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
            lifecycle: lifecycle, runtime: WorkerRuntime(now: { [clock] in clock.now }, random: random))
    }

    /// A claimed chunk of job 1 with `count` tokens (`t0`, `t1`, …).
    func chunk(
        tokens count: Int, app: String = ChunkHarness.appID, job: Int64 = 1, attempt: Int = 1, claims: Int = 1,
        expiresAt: Date? = nil, jobFailure: String? = nil
    ) -> ClaimedChunk {
        let tokens = (0..<count).map { "t\($0)" }
        return ClaimedChunk(
            id: 7, jobID: job, appID: app, priority: 0, seq: 0, kind: .tokens, tokens: tokens, attempt: attempt, claims: claims,
            estimatedTokens: count,
            job: JobDetails(id: job, appID: app, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), expiresAt: expiresAt),
            jobFailure: jobFailure)
    }

    /// Sends the chunk and returns its completion and the room it freed.
    func process(_ chunk: ClaimedChunk) async throws -> (completion: ChunkCompletion, freed: Int) {
        let freed = Atomic<Int>(0)
        let room = RoomReservation(tokens: chunk.estimatedTokens) { freed.add($0, ordering: .relaxed) }
        let completion = try await processor().process(chunk, room: room, verdicts: verdicts)
        room.releaseRest()
        return (completion, freed.load(ordering: .relaxed))
    }
}

extension ChunkCompletion {
    var requeuedTokens: [String] { requeued.flatMap(\.tokens) }
    func outcome(of token: String) -> FinalOutcome? { outcomes.first { $0.token == token } }
}

/// Counts what a fake pool's answer closure has seen, to answer the n-th request differently.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    /// Counts one more and returns the new count.
    func next() -> Int { value.add(1, ordering: .relaxed).newValue }
    var count: Int { value.load(ordering: .relaxed) }
}
