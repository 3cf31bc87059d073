import Foundation
import PostgresNIO

/// Live Activity tokens, updates and channels for the demo, through the producer's SQL API.
extension RigStore {
    /// `count` update tokens (prefix `a1`), one per activity `<activityPrefix><n>`; the activities' ids.
    public func registerActivityTokens(appID: String, count: Int, activityPrefix: String) async throws -> [String] {
        try await run("""
            SELECT push.register_device(\(appID), 'a1' || lpad(to_hex(g), 62, '0'), token_kind => 'activity',
                                        activity_id => \(activityPrefix) || g)
              FROM generate_series(1, \(count)) g
            """)
        return count > 0 ? (1...count).map { "\(activityPrefix)\($0)" } : []
    }

    /// A Live Activity update to the update tokens of `activityIDs`; the job id.
    public func enqueueActivityUpdate(appID: String, payload: String, activityIDs: [String]) async throws -> Int64? {
        try await run("""
            SELECT push.enqueue(\(appID), \(payload)::jsonb, push_type => 'liveactivity', activity_ids => \(activityIDs))
            """).first?.decode(Int64.self)
    }

    /// `push.create_channel`; the row's id.
    public func createChannel(appID: String, name: String, storagePolicy: Int) async throws -> Int64? {
        try await run("SELECT push.create_channel(\(appID), \(name), storage_policy => \(storagePolicy)::int)").first?.decode(Int64.self)
    }

    /// A channel's state and APNs id.
    public func channelState(_ id: Int64) async throws -> (state: String, channelID: String?)? {
        guard let row = try await run("SELECT state, channel_id FROM push.channels WHERE id = \(id)").first else { return nil }
        return try row.decode((String, String?).self)
    }

    /// One broadcast to a channel; the job id.
    public func enqueueChannelBroadcast(appID: String, payload: String, channel: String) async throws -> Int64? {
        try await run("SELECT push.enqueue(\(appID), \(payload)::jsonb, channel => \(channel))").first?.decode(Int64.self)
    }

    /// `push.delete_channel`.
    public func deleteChannel(appID: String, name: String) async throws {
        try await run("SELECT push.delete_channel(\(appID), \(name))")
    }
}
