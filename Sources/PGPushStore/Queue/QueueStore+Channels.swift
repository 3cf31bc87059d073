import Foundation
import PostgresNIO

/// A Live Activity broadcast channel that needs a request to APNs' channel management API: one to make, or
/// one to delete.
public struct ChannelWork: Sendable, Hashable {
    public enum Operation: String, Sendable, Hashable {
        case create
        case delete
    }

    /// `push.channels.id`.
    public var id: Int64
    public var appID: String
    /// The producer's key.
    public var name: String
    public var storagePolicy: Int
    /// APNs' id; `nil` for a channel not made yet.
    public var channelID: String?
    public var operation: Operation
    /// Management requests that failed in a row so far.
    public var attempts: Int

    public init(id: Int64, appID: String, name: String, storagePolicy: Int, channelID: String?, operation: Operation, attempts: Int) {
        self.id = id
        self.appID = appID
        self.name = name
        self.storagePolicy = storagePolicy
        self.channelID = channelID
        self.operation = operation
        self.attempts = attempts
    }
}

/// An app's active channels, for reconciling them with APNs' `all-channels`.
public struct ActiveChannels: Sendable, Hashable {
    public var appID: String
    /// APNs' ids of the channels active since before `asOf`.
    public var channelIDs: [String]
    /// When the list was read: a channel made after it is not judged by a listing taken before it.
    public var asOf: Date
}

extension QueueStore {
    /// Takes up to `limit` channels that need a management request now, each under a lease of `lease`: a
    /// worker that dies mid-request leaves the row to another once the lease runs out.
    public func claimChannelWork(limit: Int, lease: Duration) async throws -> [ChannelWork] {
        let rows = try await run("""
            UPDATE push.channels c
               SET leased_by = \(leaseOwner), leased_until = now() + make_interval(secs => \(lease.inSeconds)), updated_at = now()
             WHERE c.id IN (SELECT w.id FROM push.channels w
                             WHERE w.state IN ('creating', 'deleting') AND w.next_attempt_at <= now()
                               AND (w.leased_until IS NULL OR w.leased_until < now())
                             ORDER BY w.next_attempt_at LIMIT \(limit)
                               FOR UPDATE SKIP LOCKED)
            RETURNING c.id, c.app_id, c.name, c.storage_policy::int, c.channel_id, c.state, c.attempts
            """)
        return try rows.map { row in
            let (id, appID, name, policy, channelID, state, attempts) =
                try row.decode((Int64, String, String, Int, String?, String, Int).self)
            return ChannelWork(id: id, appID: appID, name: name, storagePolicy: policy, channelID: channelID,
                               operation: state == "deleting" ? .delete : .create, attempts: attempts)
        }
    }

    /// Records a channel APNs made: it becomes `active`, or stays `deleting` when the producer deleted it while
    /// it was being made (the next pass deletes it on APNs). Returns false when this process had lost the lease.
    @discardableResult
    public func channelCreated(_ id: Int64, channelID: String) async throws -> Bool {
        let rows = try await run("""
            UPDATE push.channels
               SET channel_id = \(channelID), state = CASE WHEN state = 'deleting' THEN 'deleting' ELSE 'active' END,
                   active_at = now(), attempts = 0, failure_reason = NULL, next_attempt_at = now(),
                   leased_by = NULL, leased_until = NULL, updated_at = now()
             WHERE id = \(id) AND leased_by = \(leaseOwner)
            RETURNING id
            """)
        return !rows.isEmpty
    }

    /// Records a channel that is gone from APNs: deleted by its request, or found missing there.
    public func channelDeleted(_ id: Int64, note: String? = nil) async throws {
        try await run("""
            UPDATE push.channels
               SET state = 'deleted', deleted_at = now(), failure_reason = \(note),
                   leased_by = NULL, leased_until = NULL, updated_at = now()
             WHERE id = \(id) AND state = 'deleting'
            """)
    }

    /// Records a management request APNs will never grant: the channel ends `failed` with `reason`.
    public func channelFailed(_ id: Int64, reason: String) async throws {
        try await run("""
            UPDATE push.channels
               SET state = 'failed', failure_reason = \(reason), leased_by = NULL, leased_until = NULL, updated_at = now()
             WHERE id = \(id) AND state IN ('creating', 'deleting')
            """)
    }

    /// Gives a channel back after a request that may succeed later, to be tried again in `after`; the reason
    /// stays visible in `failure_reason` meanwhile.
    public func channelRetry(_ id: Int64, reason: String, after: Duration) async throws {
        try await run("""
            UPDATE push.channels
               SET attempts = attempts + 1, failure_reason = \(reason),
                   next_attempt_at = now() + make_interval(secs => \(after.inSeconds)),
                   leased_by = NULL, leased_until = NULL, updated_at = now()
             WHERE id = \(id) AND leased_by = \(leaseOwner)
            """)
    }

    /// Every app's active channels, for reconciling with APNs' `all-channels`.
    public func activeChannels() async throws -> [ActiveChannels] {
        let rows = try await run("""
            SELECT c.app_id, array_agg(c.channel_id ORDER BY c.channel_id), now()
              FROM push.channels c
             WHERE c.state = 'active' AND c.channel_id IS NOT NULL
             GROUP BY c.app_id ORDER BY c.app_id
            """)
        return try rows.map { row in
            let (appID, ids, asOf) = try row.decode((String, [String], Date).self)
            return ActiveChannels(appID: appID, channelIDs: ids, asOf: asOf)
        }
    }

    /// Marks as deleted the channels of `appID` that were active at `asOf` and that APNs' `all-channels` no
    /// longer lists (`listed`): deleted elsewhere, or by APNs. Returns their names.
    public func reconcileChannels(appID: String, listed: [String], asOf: Date) async throws -> [String] {
        let rows = try await run("""
            UPDATE push.channels c
               SET state = 'deleted', deleted_at = now(), updated_at = now(),
                   failure_reason = 'deleted outside pgpush: APNs no longer lists the channel in all-channels'
             WHERE c.app_id = \(appID) AND c.state = 'active' AND c.active_at <= \(asOf)
               AND c.channel_id <> ALL (\(listed)::text[])
            RETURNING c.name
            """)
        return try rows.map { try $0.decode(String.self) }
    }

    /// Removes up to `batchSize` Live Activity update tokens not registered again within `lifetime`, each with
    /// an audit row in `push.pruned_devices` (reason `ActivityTokenExpired`). Returns how many.
    public func expireActivityTokens(lifetime: Duration, batchSize: Int = 5000) async throws -> Int {
        let rows = try await run("""
            WITH expired AS (
                DELETE FROM push.devices d
                 WHERE d.ctid = ANY (ARRAY(
                           SELECT e.ctid FROM push.devices e
                            WHERE e.token_kind = 'activity'
                              AND e.registered_at < now() - make_interval(secs => \(lifetime.inSeconds))
                            LIMIT \(batchSize)))
                   AND d.token_kind = 'activity' AND d.registered_at < now() - make_interval(secs => \(lifetime.inSeconds))
                RETURNING d.app_id, d.token, d.user_id, d.registered_at
            ), audited AS (
                INSERT INTO push.pruned_devices (app_id, token, user_id, reason, registered_at)
                SELECT app_id, token, user_id, 'ActivityTokenExpired', registered_at FROM expired
                RETURNING 1
            )
            SELECT count(*)::int8 FROM audited
            """)
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }
}
