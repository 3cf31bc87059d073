import Foundation
import NIOCore

/// The answer to one channel management request, before it is written.
struct ChannelManagementAnswer: Sendable, Hashable {
    var status: Int
    var reason: String?
    /// The `apns-channel-id` response header (a creation's new id).
    var channelID: String?
    /// A success's JSON body.
    var body: String?

    init(status: Int, reason: String? = nil, channelID: String? = nil, body: String? = nil) {
        self.status = status
        self.reason = reason
        self.channelID = channelID
        self.body = body
    }

    init(_ rejection: SimulatorRejection) {
        self.init(status: rejection.status, reason: rejection.reason)
    }
}

/// APNs' broadcast channel management API (LIVE_ACTIVITIES.md): create, read and delete a channel of a bundle
/// id, and list them all. Routing is pure; the operations act on ``SimulatorChannels``. Authentication and
/// faults come between the two, in the connection.
///
/// Where Apple documents no reason: a creation body without a valid `message-storage-policy` (0 or 1) is
/// `BadRequestParams`, like an unknown attribute.
enum ChannelManagementAPI {
    enum Operation: Sendable, Hashable {
        case create, read, delete, listAll
    }

    private static let pathPrefix = "/1/apps/"

    /// The bundle id and operation of a request, or `404 BadPath` / `405 MethodNotAllowed`.
    static func route(method: String?, path: String) -> Result<(bundleID: String, operation: Operation), SimulatorRejection> {
        let path = Substring(path)
        if let bundleID = BroadcastRules.bundleID(in: path, prefix: pathPrefix, suffix: "/channels") {
            switch method {
            case "POST": return .success((bundleID, .create))
            case "GET": return .success((bundleID, .read))
            case "DELETE": return .success((bundleID, .delete))
            default: return .failure(.init(status: 405, reason: "MethodNotAllowed"))
            }
        }
        if let bundleID = BroadcastRules.bundleID(in: path, prefix: pathPrefix, suffix: "/all-channels") {
            guard method == "GET" else { return .failure(.init(status: 405, reason: "MethodNotAllowed")) }
            return .success((bundleID, .listAll))
        }
        return .failure(.init(status: 404, reason: "BadPath"))
    }

    /// Carries out an authenticated request.
    static func answer(
        _ operation: Operation, bundleID: String, headers: BroadcastHeaders, body: ByteBuffer, allowedTopics: Set<String>?,
        channels: SimulatorChannels, limit: Int
    ) -> ChannelManagementAnswer {
        let badRequest = { (reason: String) in ChannelManagementAnswer(status: 400, reason: reason) }
        if BroadcastRules.isSuffixed(bundleID) { return badRequest("TopicDisallowed") }
        if let allowedTopics, !allowedTopics.contains(bundleID) { return badRequest("TopicDisallowed") }
        switch operation {
        case .create:
            let storagePolicy: Int
            switch creationPolicy(body) {
            case .success(let policy): storagePolicy = policy
            case .failure(let rejection): return ChannelManagementAnswer(rejection)
            }
            guard let channelID = channels.create(bundleID: bundleID, storagePolicy: storagePolicy, limit: limit) else {
                return badRequest("CannotCreateChannelConfig")
            }
            return ChannelManagementAnswer(status: 201, channelID: channelID)
        case .read, .delete:
            guard let channelID = headers.channelID, !channelID.isEmpty else { return badRequest("MissingChannelId") }
            guard BroadcastRules.isWellFormedChannelID(channelID) else { return badRequest("BadChannelId") }
            if operation == .delete {
                return channels.delete(channelID, bundleID: bundleID)
                    ? ChannelManagementAnswer(status: 204) : badRequest("ChannelNotRegistered")
            }
            guard let policy = channels.storagePolicy(of: channelID, bundleID: bundleID) else {
                return badRequest("ChannelNotRegistered")
            }
            return ChannelManagementAnswer(
                status: 200, body: #"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#)
        case .listAll:
            let ids = channels.ids(bundleID: bundleID).map { "\"\($0)\"" }.joined(separator: ",")
            return ChannelManagementAnswer(status: 200, body: #"{"channels":[\#(ids)]}"#)
        }
    }

    /// The storage policy of a creation body `{"message-storage-policy": 0 or 1, "push-type": "LiveActivity"}`.
    static func creationPolicy(_ body: ByteBuffer) -> Result<Int, SimulatorRejection> {
        func reject(_ reason: String) -> Result<Int, SimulatorRejection> { .failure(.init(status: 400, reason: reason)) }
        guard body.readableBytes > 0 else { return reject("PayloadEmpty") }
        guard let members = SimulatorJSONValue.parse(body)?.object else { return reject("BadRequestPayload") }
        let known: Set<String> = ["message-storage-policy", "push-type"]
        if members.keys.contains(where: { !known.contains($0) }) { return reject("BadRequestParams") }
        guard case .integer(let policy) = members["message-storage-policy"], policy == 0 || policy == 1 else {
            return reject("BadRequestParams")
        }
        guard let pushType = members["push-type"] else { return reject("MissingPushType") }
        guard pushType.string == "LiveActivity" else { return reject("InvalidPushType") }
        return .success(Int(policy))
    }
}
