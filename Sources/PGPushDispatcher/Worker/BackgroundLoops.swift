import Synchronization

/// The worker's background loops as tasks that are cancelled together and waited for only so long: a loop
/// stuck in a call that ignores cancellation (a connection attempt to an unreachable database) must not hold
/// a shutdown past its grace period. The process exits after that; nothing of theirs needs to finish.
final class BackgroundLoops: Sendable {
    private let tasks = Mutex<[Task<Void, Never>]>([])
    private let finished = Atomic<Int>(0)

    func start(_ loop: @escaping @Sendable () async -> Void) {
        let task = Task {
            await loop()
            self.finished.add(1, ordering: .relaxed)
        }
        tasks.withLock { $0.append(task) }
    }

    /// Cancels every loop and waits until they have all ended, or `limit` has passed.
    func cancel(waitingAtMost limit: Duration) async {
        let all = tasks.withLock { $0 }
        for task in all { task.cancel() }
        let deadline = ContinuousClock.now + limit
        while finished.load(ordering: .relaxed) < all.count, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}
