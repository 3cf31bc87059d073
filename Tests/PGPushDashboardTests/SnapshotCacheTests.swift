import Synchronization
import Testing

@testable import PGPushDashboard

/// One snapshot of the aggregates is shared between clients. Pure, fast tier.
@Suite(.timeLimit(.minutes(1)))
struct SnapshotCacheTests {
    @Test func concurrentRequestsShareOneLoadAndItsResultWhileFresh() async throws {
        let cache = SnapshotCache<Int>(ttl: .seconds(60))
        let loads = LoadCounter()
        let values = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<20 {
                group.addTask {
                    try await cache.get("overview") {
                        try await Task.sleep(for: .milliseconds(50))
                        return loads.next()
                    }
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(loads.count == 1)
        #expect(Set(values) == [1])
        #expect(try await cache.get("overview") { 99 } == 1)
        #expect(try await cache.get("other filter") { 7 } == 7)
    }

    @Test func aZeroTTLReadsAnewEachTime() async throws {
        let cache = SnapshotCache<Int>(ttl: .zero)
        #expect(try await cache.get("k") { 1 } == 1)
        #expect(try await cache.get("k") { 2 } == 2)
    }
}

private final class LoadCounter: Sendable {
    private let loads = Mutex(0)

    func next() -> Int {
        loads.withLock { $0 += 1; return $0 }
    }

    var count: Int { loads.withLock { $0 } }
}
