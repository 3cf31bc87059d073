import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PGPushStore

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

    /// A `push.enqueue` call of the demo's app, as a producer would make it.
    private static func request(
        _ appID: String, _ payload: String, pushType: String? = nil, activityIDs: [String]? = nil, channel: String? = nil
    ) -> EnqueueRequest {
        EnqueueRequest(appID: appID, payload: payload, pushType: pushType, apnsPriority: nil, tokens: nil, userIDs: nil,
                       tags: nil, sendAt: nil, expiresAt: nil, ttlSeconds: nil, collapseID: nil, idempotencyKey: nil,
                       priority: nil, activityIDs: activityIDs, channel: channel)
    }

    static func run(on rig: BroadcastRig, timeout: Duration) async throws -> Result {
        let (database, producer) = (try rig.database, try rig.operatorStore)
        let ids = try await database.registerActivityTokens(appID: rig.appID, count: activities, activityPrefix: "demo-order-")
        guard let update = try await producer.enqueue(Self.request(rig.appID, Self.update, pushType: "liveactivity", activityIDs: ids))
        else { throw EmbeddedError("push.enqueue returned nothing") }
        let updated = try await rig.waitForJob(update, interval: .milliseconds(100), timeout: timeout) { _, _ in }

        let channel = try await producer.createChannel(appID: rig.appID, name: "demo-match", storagePolicy: 0)
        let deadline = ContinuousClock.now + timeout
        var channelID: String?
        while ContinuousClock.now < deadline, channelID == nil {
            if let row = try await producer.channelState(id: channel), row.state != "creating" {
                guard row.state == "active" else { throw EmbeddedError("the demo channel ended \(row.state)") }
                channelID = row.channelID
            } else {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        guard channelID != nil else { throw EmbeddedError("the demo channel was not made in time") }
        let before = rig.broadcastRequests
        guard let broadcast = try await producer.enqueue(Self.request(rig.appID, Self.channelUpdate, channel: "demo-match"))
        else { throw EmbeddedError("push.enqueue returned nothing") }
        let broadcasted = try await rig.waitForJob(broadcast, interval: .milliseconds(100), timeout: deadline - .now) { _, _ in }

        _ = try await producer.deleteChannel(appID: rig.appID, name: "demo-match")
        var deleted = false
        while ContinuousClock.now < deadline, !deleted {
            deleted = try await producer.channelState(id: channel)?.state == "deleted"
            if !deleted { try await Task.sleep(for: .milliseconds(100)) }
        }
        return Result(
            activities: ids.count, updateState: updated.state, updateDelivered: updated.delivered, channelID: channelID,
            broadcastState: broadcasted.state, broadcastRequests: rig.broadcastRequests - before, channelDeleted: deleted)
    }
}
