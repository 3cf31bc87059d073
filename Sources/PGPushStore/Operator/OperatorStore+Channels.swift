import Foundation
import PostgresNIO

/// One row of `push.channels` as `pgpush channels list` shows it.
public struct ChannelListing: Sendable {
    public var appID, name, state: String
    public var storagePolicy: Int
    public var channelID, failureReason: String?
    public var createdAt: Date
    public var activeAt, deletedAt: Date?
}

extension OperatorStore {
    /// The channels of one app, or of every app, newest first; deleted and failed ones only with `includeEnded`.
    public func listChannels(appID: String?, includeEnded: Bool) async throws -> [ChannelListing] {
        let rows = try await run("""
            SELECT app_id, name, state, storage_policy::int, channel_id, failure_reason, created_at, active_at, deleted_at
              FROM push.channels
             WHERE (\(appID)::text IS NULL OR app_id = \(appID))
               AND (\(includeEnded) OR state IN ('creating', 'active', 'deleting'))
             ORDER BY app_id, created_at DESC, id DESC
            """)
        return try rows.map { row in
            let (app, name, state, policy, channelID, reason, created, active, deleted) = try row.decode(
                (String, String, String, Int, String?, String?, Date, Date?, Date?).self)
            return ChannelListing(appID: app, name: name, state: state, storagePolicy: policy, channelID: channelID,
                                  failureReason: reason, createdAt: created, activeAt: active, deletedAt: deleted)
        }
    }

    /// `push.create_channel`: the row's id (an existing live channel of that name and policy is the same one).
    public func createChannel(appID: String, name: String, storagePolicy: Int) async throws -> Int64 {
        let rows = try await run("SELECT push.create_channel(\(appID), \(name), storage_policy => \(storagePolicy)::int)")
        return try rows.first?.decode(Int64.self) ?? 0
    }

    /// `push.delete_channel`: marks the channel for deletion on APNs; the row's id.
    public func deleteChannel(appID: String, name: String) async throws -> Int64 {
        let rows = try await run("SELECT push.delete_channel(\(appID), \(name))")
        return try rows.first?.decode(Int64.self) ?? 0
    }

    /// One channel's state and APNs id, for waiting on it.
    public func channelState(id: Int64) async throws -> (state: String, channelID: String?, failureReason: String?)? {
        let rows = try await run("SELECT state, channel_id, failure_reason FROM push.channels WHERE id = \(id)")
        guard let row = rows.first else { return nil }
        let (state, channelID, reason) = try row.decode((String, String?, String?).self)
        return (state, channelID, reason)
    }
}
