import Synchronization

/// One run of an operation at a time, shared by every caller that arrives while it runs: many chunks asking
/// for a token due for refresh cause one refresh, not one each.
final class SingleFlight<Value: Sendable>: Sendable {
    private let running = Mutex<Task<Value, any Error>?>(nil)

    func run(_ operation: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let task = running.withLock { running in
            if let running { return running }
            // Unstructured on purpose: the run belongs to every caller waiting for it, so it must not be
            // cancelled with the first of them, which a child task of that caller would be.
            let task = Task { try await operation() }
            running = task
            return task
        }
        defer { running.withLock { if $0 == task { $0 = nil } } }
        return try await task.value
    }
}
