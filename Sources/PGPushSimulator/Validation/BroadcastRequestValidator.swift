import Foundation
import NIOCore
import PGPushCore

/// A broadcast send that passed every check.
struct ValidatedBroadcast: Sendable, Hashable {
    var bundleID: String
    var channelID: String
    var priority: Int
    var expiration: Int64
}

/// APNs' rules for `POST /4/broadcasts/apps/<bundle id>` (the table of LIVE_ACTIVITIES.md) as pure functions.
/// Authentication and faults come between ``route(method:path:)`` and ``validate(_:bundleID:body:allowedTopics:storagePolicy:)``,
/// in the connection.
///
/// Where Apple documents no reason: a missing `apns-expiration` is `BadExpirationDate`, a missing or
/// unknown `apns-priority` `BadPriority`, and a body that parses but is not an update's or end's `aps`
/// (``LiveActivityPayloadRules``) `BadRequestPayload`.
enum BroadcastRequestValidator {
    static let pathPrefix = "/4/broadcasts/apps/"
    /// APNs' limit for a broadcast's body.
    static let maximumPayloadBytes = 5120

    /// The bundle id of a broadcast path, or `404 BadPath` / `405 MethodNotAllowed`.
    static func route(method: String?, path: String) -> Result<String, SimulatorRejection> {
        guard let bundleID = BroadcastRules.bundleID(in: Substring(path), prefix: pathPrefix, suffix: "") else {
            return .failure(.init(status: 404, reason: "BadPath"))
        }
        guard method == "POST" else { return .failure(.init(status: 405, reason: "MethodNotAllowed")) }
        return .success(bundleID)
    }

    /// Checks headers and body, then the channel: `storagePolicy` gives a live channel's policy when it
    /// belongs to the bundle id, `nil` otherwise.
    static func validate(
        _ headers: BroadcastHeaders, bundleID: String, body: ByteBuffer, allowedTopics: Set<String>?,
        storagePolicy: (String) -> Int?
    ) -> Result<ValidatedBroadcast, SimulatorRejection> {
        func reject(_ reason: String, status: Int = 400) -> Result<ValidatedBroadcast, SimulatorRejection> {
            .failure(.init(status: status, reason: reason))
        }
        if BroadcastRules.isSuffixed(bundleID) { return reject("TopicDisallowed") }
        if let allowedTopics, !allowedTopics.contains(bundleID) { return reject("TopicDisallowed") }
        guard let channelID = headers.channelID, !channelID.isEmpty else { return reject("MissingChannelId") }
        guard BroadcastRules.isWellFormedChannelID(channelID) else { return reject("BadChannelId") }
        guard let pushType = headers.pushType, !pushType.isEmpty else { return reject("MissingPushType") }
        guard pushType == PushType.liveactivity.rawValue else { return reject("InvalidPushType") }
        guard let priority = headers.priority.flatMap({ Int($0) }), [10, 5, 1].contains(priority) else {
            return reject("BadPriority")
        }
        guard let expiration = headers.expiration.flatMap({ Int64($0) }), expiration >= 0 else {
            return reject("BadExpirationDate")
        }
        guard body.readableBytes > 0 else { return reject("PayloadEmpty") }
        guard body.readableBytes <= maximumPayloadBytes else { return reject("PayloadTooLarge", status: 413) }
        guard SimulatorJSONValue.parse(body)?.object != nil else { return reject("BadRequestPayload") }
        if let rejection = LiveActivityPayloadRules.check(body, endpoint: .broadcast) { return .failure(rejection) }
        guard let policy = storagePolicy(channelID) else { return reject("ChannelNotRegistered") }
        // A channel that stores nothing cannot take a message meant to wait for a device.
        if policy == 0, expiration != 0 { return reject("BadExpirationDate") }
        return .success(ValidatedBroadcast(bundleID: bundleID, channelID: channelID, priority: priority, expiration: expiration))
    }
}
