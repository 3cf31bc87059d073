import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// The audit reason of a device removed because it did not register again in time.
    public static let staleDeviceReason = "Stale"

    /// Where a sweep for stale devices stands: the batch's removals, and where the next batch starts (`nil`
    /// once the sweep reached the end of `push.devices`).
    public struct StaleDeviceBatch: Sendable, Hashable {
        public var removed: Int
        public var next: String?

        public init(removed: Int, next: String?) {
            self.removed = removed
            self.next = next
        }
    }

    /// One batch of a sweep for stale devices: removes up to `batchSize` devices (Live Activity update tokens
    /// aside: they have their own lifetime) whose `registered_at` is older than `age`, each with a
    /// `push.pruned_devices` row of reason `Stale` (and so a `devices_pruned` event).
    ///
    /// `push.devices` has no index on `registered_at` (every registration would pay for it), so a sweep reads
    /// the table once in physical order: each batch scans a TID range from where the last one stopped
    /// (`after`, a `ctid`), and nothing is read twice. A device that registers again meanwhile is kept: the
    /// delete checks its age again on the row it finds.
    public func removeStaleDevices(olderThan age: Duration, after: String? = nil, batchSize: Int = 5000) async throws -> StaleDeviceBatch {
        let seconds = age.inSeconds
        let rows = try await run("""
            WITH batch AS MATERIALIZED (
                SELECT e.ctid AS at_ctid FROM push.devices e
                 WHERE e.ctid > \(after ?? "(0,0)")::tid
                   AND e.registered_at < now() - make_interval(secs => \(seconds)) AND e.token_kind <> 'activity'
                 LIMIT \(batchSize)
            ), stale AS (
                DELETE FROM push.devices d
                 WHERE d.ctid = ANY (ARRAY(SELECT at_ctid FROM batch))
                   AND d.registered_at < now() - make_interval(secs => \(seconds)) AND d.token_kind <> 'activity'
                RETURNING d.app_id, d.token, d.user_id, d.registered_at
            ), audited AS (
                INSERT INTO push.pruned_devices (app_id, token, user_id, reason, registered_at)
                SELECT app_id, token, user_id, \(Self.staleDeviceReason), registered_at FROM stale
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM batch)::int8, (SELECT count(*) FROM audited)::int8, (SELECT max(at_ctid) FROM batch)::text
            """)
        guard let row = rows.first else { return StaleDeviceBatch(removed: 0, next: nil) }
        let (found, removed, last) = try row.decode((Int64, Int64, String?).self)
        return StaleDeviceBatch(removed: Int(removed), next: found < Int64(batchSize) ? nil : last)
    }

    /// A whole sweep: batches of ``removeStaleDevices(olderThan:after:batchSize:)`` until the end of the table.
    /// Returns the devices removed.
    public func removeStaleDevices(olderThan age: Duration, batchSize: Int = 5000) async throws -> Int {
        var removed = 0
        var next: String?
        repeat {
            let batch = try await removeStaleDevices(olderThan: age, after: next, batchSize: batchSize)
            removed += batch.removed
            next = batch.next
        } while next != nil
        return removed
    }
}
