import Foundation

/// Snapshots of a page's aggregates (the overview, outcomes, pruned counts), each shared by every client for
/// ``DashboardConfiguration/overviewCacheTTL``: a wall of open dashboards costs the database one set of queries
/// per interval and filter, and concurrent requests for an expired snapshot wait for the same refresh instead
/// of each starting one. All clients share the dashboard's one database login, so they may see the same rows.
actor SnapshotCache<Value: Sendable> {
    private let ttl: Duration
    private let capacity: Int
    private var snapshots: [String: (at: ContinuousClock.Instant, value: Value)] = [:]
    private var refreshing: [String: Task<Value, any Error>] = [:]

    /// - Parameter capacity: how many keys (filters) are kept; the oldest snapshot goes first.
    init(ttl: Duration, capacity: Int = 64) {
        self.ttl = ttl
        self.capacity = capacity
    }

    func get(_ key: String, _ load: @escaping @Sendable () async throws -> Value) async throws -> Value {
        if let snapshot = snapshots[key], ContinuousClock.now - snapshot.at < ttl { return snapshot.value }
        if let task = refreshing[key] { return try await task.value }
        // Unstructured on purpose: every request waiting for this refresh shares it, and the first one's
        // cancellation (its client went away) must not cancel it for the others.
        let task = Task { try await load() }
        refreshing[key] = task
        defer { refreshing[key] = nil }
        let value = try await task.value
        if ttl > .zero {
            if snapshots.count >= capacity, let oldest = snapshots.min(by: { $0.value.at < $1.value.at })?.key {
                snapshots[oldest] = nil
            }
            snapshots[key] = (ContinuousClock.now, value)
        }
        return value
    }
}
