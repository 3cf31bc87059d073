import Foundation
import Logging
import PGPushCore
@testable import PGPushDispatcher
import PGPushDispatcherTesting
import PGPushStore
import ServiceLifecycle
import ServiceLifecycleTestKit

/// A whole ``Worker`` (claim, send, write, heartbeat, maintenance) on the in-memory store, one app's fake pool
/// and a test clock. Its poll and heartbeat intervals are short, so it finds work at once; the test waits on
/// the store's contents, never for a fixed time.
struct WorkerHarness {
    static let appID = "app"
    let clock = TestClock()
    let store: InMemoryWorkerStore
    let senders = FakeAppSenders()
    let pool: FakePushPool
    var configuration = WorkerConfiguration()
    /// The backoff's random draws: `.max` takes the whole jitter window.
    var random: WorkerRuntimeRandom = SeededRandom.constant(.max)

    init(app: AppRecord = AppRecord(id: WorkerHarness.appID, topic: "com.example.app", environment: "production"),
         lease: Duration = .seconds(30), maintenanceInterval: Duration = .milliseconds(20),
         answer: @escaping @Sendable (FakePushPool.Request) -> FakePushPool.Answer = { _ in .now(.ok) }) {
        store = InMemoryWorkerStore(clock: clock)
        pool = FakePushPool(clock: clock, answer: answer)
        store.addApp(app)
        senders.add(app, pool: pool)
        configuration.workerID = "test-worker"
        configuration.pollInterval = .milliseconds(5)
        configuration.heartbeatInterval = .milliseconds(20)
        configuration.maintenanceInterval = maintenanceInterval
        configuration.lease = lease
        configuration.gracePeriod = .seconds(20)
    }

    /// Adds another app with its own pool.
    @discardableResult
    func addApp(_ app: AppRecord, answer: @escaping @Sendable (FakePushPool.Request) -> FakePushPool.Answer = { _ in .now(.ok) })
        -> FakePushPool {
        let pool = FakePushPool(clock: clock, answer: answer)
        store.addApp(app)
        senders.add(app, pool: pool)
        return pool
    }

    func makeWorker() -> Worker {
        Worker(configuration: configuration, store: store, senders: senders,
               runtime: WorkerRuntime(now: { [clock] in clock.now }, random: random),
               logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    /// Runs a worker while `body` runs, then shuts it down gracefully and waits for it to end. `body` may
    /// start the shutdown itself with the trigger.
    func run(_ body: @escaping @Sendable (Worker, GracefulShutdownTestTrigger) async throws -> Void) async throws {
        let worker = makeWorker()
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await worker.run() }
                try await body(worker, trigger)
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
    }
}

extension Worker {
    /// Returns once a graceful shutdown has reached the sending: no new request starts.
    func sendingStopped() async {
        while !lifecycle.isStopping { await Task.yield() }
    }
}
