/// Runs `operation` in a task the caller's cancellation reaches only `allowance` later. For a database write
/// whose effect the caller must see to undo it: a claim cancelled the instant a shutdown starts may still commit
/// on the server, and the chunks it took would stay locked until their lease ran out; given a moment, it
/// returns them and they are given back. A statement stuck on an unreachable database is still cut short.
func withCancellationDelayed<T: Sendable>(
    by allowance: Duration, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    // Unstructured on purpose: a child task would be cancelled together with its parent.
    let work = Task { try await operation() }
    return try await withTaskCancellationHandler {
        try await work.value
    } onCancel: {
        // Unstructured: a cancellation handler cannot wait. It lives at most `allowance`, and only on cancellation.
        Task {
            try? await Task.sleep(for: allowance)
            work.cancel()
        }
    }
}
