import Foundation
import PGPushDevelopment

/// The demo's Live Activity part, after the broadcast: an update to a few running activities by their ids,
/// and a broadcast channel made on the simulator's channel management API, sent to once and deleted.
struct DemoLiveActivities: Sendable {
    /// What it did, for the summary.
    struct Result: Sendable {
        var activities: Int
        var updateState: String
        var updateDelivered: Int64
        var channelID: String?
        var broadcastState: String
        /// Broadcast requests the simulator accepted: one, whatever the number of subscribers.
        var broadcastRequests: Int
        var channelDeleted: Bool

        var lines: [String] {
            [
                "Live Activity update to \(activities) activities: \(updateState), \(updateDelivered) delivered",
                "Broadcast channel \(channelID ?? "(not made)"): broadcast \(broadcastState) in \(broadcastRequests) request(s); "
                    + (channelDeleted ? "deleted" : "not deleted"),
            ]
        }

        var json: [String: Any] {
            ["activities": activities, "update_state": updateState, "update_delivered": updateDelivered,
             "channel_id": jsonValue(channelID), "broadcast_state": broadcastState,
             "broadcast_requests": broadcastRequests, "channel_deleted": channelDeleted]
        }
    }

    static let activities = 3
    static let update = #"{"aps":{"timestamp":1767225600,"event":"update","content-state":{"courier":"2 stops away"}}}"#
    static let channelUpdate = #"{"aps":{"timestamp":1767225600,"event":"update","content-state":{"score":"2-1","minute":89}}}"#

    static func run(on rig: BroadcastRig, timeout: Duration) async throws -> Result {
        let database = try rig.database
        let ids = try await database.registerActivityTokens(appID: rig.appID, count: activities, activityPrefix: "demo-order-")
        guard let update = try await database.enqueueActivityUpdate(appID: rig.appID, payload: Self.update, activityIDs: ids)
        else { throw EmbeddedError("push.enqueue returned nothing") }
        let updated = try await rig.waitForJob(update, interval: .milliseconds(100), timeout: timeout) { _, _ in }

        guard let channel = try await database.createChannel(appID: rig.appID, name: "demo-match", storagePolicy: 0)
        else { throw EmbeddedError("push.create_channel returned nothing") }
        let deadline = ContinuousClock.now + timeout
        var channelID: String?
        while ContinuousClock.now < deadline, channelID == nil {
            if let row = try await database.channelState(channel), row.state != "creating" {
                guard row.state == "active" else { throw EmbeddedError("the demo channel ended \(row.state)") }
                channelID = row.channelID
            } else {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        guard channelID != nil else { throw EmbeddedError("the demo channel was not made in time") }
        let before = rig.broadcastRequests
        guard let broadcast = try await database.enqueueChannelBroadcast(appID: rig.appID, payload: Self.channelUpdate, channel: "demo-match")
        else { throw EmbeddedError("push.enqueue returned nothing") }
        let broadcasted = try await rig.waitForJob(broadcast, interval: .milliseconds(100), timeout: deadline - .now) { _, _ in }

        try await database.deleteChannel(appID: rig.appID, name: "demo-match")
        var deleted = false
        while ContinuousClock.now < deadline, !deleted {
            deleted = try await database.channelState(channel)?.state == "deleted"
            if !deleted { try await Task.sleep(for: .milliseconds(100)) }
        }
        return Result(
            activities: ids.count, updateState: updated.state, updateDelivered: updated.delivered, channelID: channelID,
            broadcastState: broadcasted.state, broadcastRequests: rig.broadcastRequests - before, channelDeleted: deleted)
    }
}
