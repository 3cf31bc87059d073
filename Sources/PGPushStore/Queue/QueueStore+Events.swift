import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// The NOTIFY channel of `push.job_events`: one notification per transaction that wrote events, its payload
    /// the highest new id.
    public static let jobEventsChannel = "pgpush_job_events"

    /// Retention of `push.job_events`: the events numbered before `keep` ago, oldest first, in batches of
    /// `batchSize`, until a batch is not full or `maximumBatches` ran. An event's `at` is taken with its id at
    /// commit (migration 0025), so the oldest events are the lowest ids: each batch reads the lowest `batchSize`
    /// ids through the primary key and deletes those old enough, and needs no index of its own.
    public func removeExpiredEvents(olderThan keep: Duration, batchSize: Int = 5000, maximumBatches: Int = 20) async throws -> Int {
        let seconds = keep.inSeconds
        var removed = 0
        for _ in 0..<max(1, maximumBatches) {
            let batch = try await run("""
                DELETE FROM push.job_events WHERE id IN (
                    SELECT o.id FROM (SELECT e.id, e.at FROM push.job_events e ORDER BY e.id LIMIT \(batchSize)) o
                     WHERE o.at < now() - make_interval(secs => \(seconds)))
                RETURNING id
                """).count
            removed += batch
            if batch < batchSize { break }
        }
        return removed
    }
}
