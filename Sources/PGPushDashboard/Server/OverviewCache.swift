import Foundation
import PGPushStore

/// One snapshot of the overview's aggregates, shared by every client for ``DashboardConfiguration/overviewCacheTTL``:
/// a wall of open dashboards costs the database one set of queries per interval, and concurrent requests for an
/// expired snapshot wait for the same refresh instead of each starting one.
actor OverviewCache {
    private let ttl: Duration
    private var snapshot: (at: ContinuousClock.Instant, value: DashboardOverview)?
    private var refreshing: Task<DashboardOverview, any Error>?

    init(ttl: Duration) {
        self.ttl = ttl
    }

    func get(_ load: @escaping @Sendable () async throws -> DashboardOverview) async throws -> DashboardOverview {
        if let snapshot, ContinuousClock.now - snapshot.at < ttl { return snapshot.value }
        if let refreshing { return try await refreshing.value }
        let task = Task { try await load() }
        refreshing = task
        defer { refreshing = nil }
        let value = try await task.value
        snapshot = (ContinuousClock.now, value)
        return value
    }
}
