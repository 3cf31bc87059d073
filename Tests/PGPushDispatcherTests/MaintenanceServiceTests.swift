import Foundation
import PostgresNIO
import ServiceLifecycle
import Synchronization
import Testing

@testable import PGPushDispatcher

/// Each maintenance task is its own ``MaintenanceService``: on its own interval, and failing alone. Time is a
/// ``ManualClock`` moved by the test; nothing sleeps.
@Suite(.timeLimit(.minutes(1)))
struct MaintenanceServiceTests {
    /// A task whose passes are published, and that fails (or hangs) while told to.
    final class FakeTask: Sendable {
        enum Mode { case succeed, fail, hang }
        let name: String
        let passes: AsyncStream<Int>
        private let continuation: AsyncStream<Int>.Continuation
        private let state: Mutex<(mode: Mode, count: Int)>
        private let hangClock = ManualClock()

        init(_ name: String, mode: Mode = .succeed) {
            self.name = name
            (passes, continuation) = AsyncStream.makeStream(of: Int.self)
            state = Mutex((mode, 0))
        }

        var count: Int { state.withLock { $0.count } }

        func task(interval: Duration, leaderOnly: Bool = false) -> MaintenanceTask {
            MaintenanceTask(name: name, interval: interval, leaderOnly: leaderOnly) { try await self.step() }
        }

        private func step() async throws {
            let (mode, count) = state.withLock { state in
                state.count += 1
                return (state.mode, state.count)
            }
            continuation.yield(count)
            switch mode {
            case .succeed: return
            case .fail: throw TaskFailure(pass: count)
            case .hang: try await hangClock.sleep(for: .seconds(86_400 * 365))  // until cancelled
            }
        }
    }

    struct TaskFailure: Error, Equatable { var pass: Int }

    /// The failures a service reported: the task's name for each.
    final class Failures: Sendable {
        private let reported = Mutex<[String]>([])
        var tasks: [String] { reported.withLock { $0 } }
        func record(_ error: any Error, _ task: MaintenanceTask) {
            guard error is TaskFailure else {
                Issue.record("unexpected failure \(error)")
                return
            }
            reported.withLock { $0.append(task.name) }
        }
    }

    /// Whether the worker leads maintenance, as the leadership task would set it.
    final class Leadership: Sendable {
        private let leading = Atomic<Bool>(false)
        var isLeader: Bool { leading.load(ordering: .relaxed) }
        func take() { leading.store(true, ordering: .relaxed) }
    }

    static func service(
        _ task: MaintenanceTask, clock: ManualClock, failures: Failures = Failures(), leader: @escaping @Sendable () -> Bool = { true },
        firstRunAfter: Duration = .zero, jitter: Duration = .zero, random: @escaping @Sendable () -> Double = { 0 }
    ) -> MaintenanceService<ManualClock> {
        MaintenanceService(
            task: task, isLeader: leader, failed: { failures.record($0, $1) }, clock: clock, firstRunAfter: firstRunAfter,
            jitter: jitter, random: random)
    }

    /// Runs `services` while `body` runs, then cancels them.
    static func running<T: Sendable>(
        _ services: [MaintenanceService<ManualClock>], _ body: () async throws -> T
    ) async rethrows -> T {
        let tasks = services.map { service in Task { await service.run() } }
        do {
            let result = try await body()
            await stop(tasks)
            return result
        } catch {
            await stop(tasks)
            throw error
        }
    }

    static func stop(_ tasks: [Task<Void, Never>]) async {
        for task in tasks {
            task.cancel()
            await task.value
        }
    }

    @Test func aTaskRunsAfterItsFirstWaitThenEveryInterval() async throws {
        let clock = ManualClock()
        let fake = FakeTask("partitions")
        var passes = fake.passes.makeAsyncIterator()
        try await Self.running([Self.service(fake.task(interval: .seconds(5)), clock: clock, firstRunAfter: .seconds(2))]) {
            await clock.waitForSleepers(1)
            clock.advance(by: .milliseconds(1999))
            #expect(clock.sleepers == 1 && fake.count == 0, "the first pass waits for its turn")
            clock.advance(by: .milliseconds(1))
            #expect(await passes.next() == 1)

            for pass in 2...4 {
                await clock.waitForSleepers(1)
                clock.advance(by: .milliseconds(4999))
                #expect(clock.sleepers == 1 && fake.count == pass - 1, "not before its interval")
                clock.advance(by: .milliseconds(1))
                #expect(await passes.next() == pass)
            }
            try #require(clock.now.offset == .seconds(17))
        }
    }

    @Test func aFailingTaskIsReportedAndRunsAgainAtItsNextInterval() async throws {
        let clock = ManualClock()
        let failures = Failures()
        let fake = FakeTask("drained jobs", mode: .fail)
        var passes = fake.passes.makeAsyncIterator()
        await Self.running([Self.service(fake.task(interval: .seconds(5)), clock: clock, failures: failures)]) {
            #expect(await passes.next() == 1)
            for pass in 2...3 {
                await clock.waitForSleepers(1)
                clock.advance(by: .seconds(5))
                #expect(await passes.next() == pass)
            }
            await clock.waitForSleepers(1)
            #expect(failures.tasks == ["drained jobs", "drained jobs", "drained jobs"])
        }
    }

    @Test func aFailingTaskStopsNoOtherAndDelaysNone() async throws {
        let clock = ManualClock()
        let failures = Failures()
        let failing = FakeTask("answer window", mode: .fail)
        let healthy = FakeTask("dead workers")
        var healthyPasses = healthy.passes.makeAsyncIterator()
        var failingPasses = failing.passes.makeAsyncIterator()
        let services = [
            Self.service(failing.task(interval: .seconds(5)), clock: clock, failures: failures),
            Self.service(healthy.task(interval: .seconds(5)), clock: clock, failures: failures, firstRunAfter: .seconds(1)),
        ]
        await Self.running(services) {
            #expect(await failingPasses.next() == 1)
            await clock.waitForSleepers(2)
            for pass in 1...3 {
                clock.advance(by: .seconds(1))  // the healthy task's turn, on time
                #expect(await healthyPasses.next() == pass)
                await clock.waitForSleepers(2)
                clock.advance(by: .seconds(4))  // the failing task's turn: it fails again
                #expect(await failingPasses.next() == pass + 1)
                await clock.waitForSleepers(2)
            }
            #expect(failures.tasks == Array(repeating: "answer window", count: 4))
        }
    }

    @Test func aHangingTaskDelaysNoOther() async throws {
        let clock = ManualClock()
        let hanging = FakeTask("delivery partitions", mode: .hang)
        let healthy = FakeTask("ended jobs' chunks")
        var hangingPasses = hanging.passes.makeAsyncIterator()
        var healthyPasses = healthy.passes.makeAsyncIterator()
        let services = [
            Self.service(hanging.task(interval: .seconds(5)), clock: clock),
            Self.service(healthy.task(interval: .seconds(5)), clock: clock),
        ]
        await Self.running(services) {
            #expect(await hangingPasses.next() == 1)
            #expect(await healthyPasses.next() == 1)
            for pass in 2...4 {
                await clock.waitForSleepers(1)  // the healthy task's wait; the hanging one waits on no clock of ours
                clock.advance(by: .seconds(5))
                #expect(await healthyPasses.next() == pass)
            }
            #expect(hanging.count == 1)
        }
    }

    @Test func aLeaderOnlyTaskWaitsOnAFollowerAndRunsOnceItLeads() async throws {
        let clock = ManualClock()
        let leadership = Leadership()
        let fake = FakeTask("dead workers")
        var passes = fake.passes.makeAsyncIterator()
        let service = Self.service(
            fake.task(interval: .seconds(5), leaderOnly: true), clock: clock, leader: { leadership.isLeader })
        try await Self.running([service]) {
            for _ in 0..<20 {
                await clock.waitForSleepers(1)
                clock.advance(by: .milliseconds(100))  // a follower looks again every 100 ms
            }
            await clock.waitForSleepers(1)
            #expect(fake.count == 0)
            leadership.take()
            clock.advance(by: .milliseconds(100))
            #expect(await passes.next() == 1)
            await clock.waitForSleepers(1)
            clock.advance(by: .seconds(5))
            #expect(await passes.next() == 2)
            try #require(clock.now.offset == .milliseconds(7100))
        }
    }

    @Test func jitterAddsARandomShareOfItToEachWait() async throws {
        let clock = ManualClock()
        let fake = FakeTask("pruning")
        var passes = fake.passes.makeAsyncIterator()
        let service = Self.service(fake.task(interval: .seconds(5)), clock: clock, jitter: .seconds(2), random: { 0.5 })
        #expect(service.nextWait() == .seconds(6))
        #expect(Self.service(fake.task(interval: .seconds(5)), clock: clock).nextWait() == .seconds(5), "no jitter, the interval")
        await Self.running([service]) {
            #expect(await passes.next() == 1)
            await clock.waitForSleepers(1)
            clock.advance(by: .milliseconds(5999))
            #expect(clock.sleepers == 1 && fake.count == 1)
            clock.advance(by: .milliseconds(1))
            #expect(await passes.next() == 2)
        }
    }

    @Test func aPassCutShortByShutdownIsNotReportedAsAFailure() async throws {
        let clock = ManualClock()
        let failures = Failures()
        let fake = FakeTask("retention", mode: .hang)
        var passes = fake.passes.makeAsyncIterator()
        let service = Self.service(fake.task(interval: .seconds(5)), clock: clock, failures: failures)
        let run = Task { await service.run() }
        #expect(await passes.next() == 1)
        run.cancel()
        await run.value
        #expect(failures.tasks.isEmpty)
    }

    /// The worker's task list: queue upkeep is five tasks, each leader-only at the maintenance interval, and every
    /// task gets its own service, their first passes spread over the interval.
    @Test func theWorkerRunsEachQueueUpkeepTaskAsItsOwnService() throws {
        var configuration = WorkerConfiguration()
        configuration.maintenanceInterval = .seconds(7)
        configuration.maintenanceJitter = .milliseconds(300)
        let client = PostgresClient(configuration: .init(
            host: "127.0.0.1", port: 1, username: "nobody", password: nil, database: nil, tls: .disable))
        let worker = Worker(configuration: configuration, client: client, logger: .init(label: "test"))

        let tasks = MaintenanceTask.all(for: worker)
        let byName = Dictionary(tasks.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        #expect(byName.count == tasks.count, "one task per name")
        for name in ["delivery partitions", "drained jobs", "ended jobs' chunks", "answer window", "dead workers"] {
            let task = try #require(byName[name], "\(name)")
            #expect(task.leaderOnly && task.interval == .seconds(7), "\(name)")
        }
        #expect(byName["queue upkeep"] == nil)
        #expect(byName["leadership"]?.leaderOnly == false && byName["app reload"]?.leaderOnly == false)
        #expect(byName["retention"]?.leaderOnly == true && byName["pruning"]?.leaderOnly == true)
        #expect(byName["channel requests"]?.interval == configuration.channelPollInterval)
        #expect(byName["channel reconciling"]?.interval == configuration.channelReconcileInterval)

        let services = worker.maintenanceServices().compactMap { $0 as? MaintenanceService<ContinuousClock> }
        #expect(services.map(\.task.name) == tasks.map(\.name))
        #expect(services.allSatisfy { $0.jitter == .milliseconds(300) })
        let starts = services.filter { $0.task.interval == .seconds(7) }.map(\.firstRunAfter)
        #expect(Set(starts).count == starts.count && starts.allSatisfy { $0 < .seconds(7) }, "spread over the interval: \(starts)")
    }
}

/// A clock that moves only when told (``advance(by:)``), for services whose waits a test steps through.
final class ManualClock: Clock, Sendable {
    struct Instant: InstantProtocol {
        var offset: Duration
        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var nextID = 0
        var sleepers: [Int: Sleeper] = [:]
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

        /// The watchers whose count of sleepers is reached, removed.
        mutating func satisfiedWatchers() -> [CheckedContinuation<Void, Never>] {
            let ready = watchers.filter { sleepers.count >= $0.count }.map(\.continuation)
            watchers.removeAll { sleepers.count >= $0.count }
            return ready
        }
    }

    private let state = Mutex(State())

    var now: Instant { state.withLock { $0.now } }
    var minimumResolution: Duration { .zero }
    /// How many tasks sleep on this clock now.
    var sleepers: Int { state.withLock { $0.sleepers.count } }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (result, watchers): (Result<Void, any Error>?, [CheckedContinuation<Void, Never>]) = state.withLock { state in
                    if Task.isCancelled { return (.failure(CancellationError()), []) }
                    if deadline <= state.now { return (.success(()), []) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return (nil, state.satisfiedWatchers())
                }
                if let result { continuation.resume(with: result) }
                watchers.forEach { $0.resume() }
            }
        } onCancel: {
            state.withLock { $0.sleepers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time on, waking the sleepers whose deadline it reaches.
    func advance(by duration: Duration) {
        let woken = state.withLock { state in
            state.now = state.now.advanced(by: duration)
            let due = state.sleepers.filter { $0.value.deadline <= state.now }
            for id in due.keys { state.sleepers[id] = nil }
            return due.values.map(\.continuation)
        }
        woken.forEach { $0.resume() }
    }

    /// Returns once at least `count` tasks sleep on this clock.
    func waitForSleepers(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state in
                if state.sleepers.count >= count { return true }
                state.watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}
