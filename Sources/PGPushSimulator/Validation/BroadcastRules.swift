import Foundation
import NIOHPACK
import PGPushCore

/// Rules the broadcast send and the channel management API share.
enum BroadcastRules {
    /// A bundle id carrying a push-type suffix (`com.example.app.push-type.liveactivity`, `.voip`, …): both
    /// APIs want the bare bundle id and answer `400 TopicDisallowed`.
    static func isSuffixed(_ bundleID: String) -> Bool {
        PushType.allCases.contains { !$0.topicSuffix.isEmpty && bundleID.hasSuffix($0.topicSuffix) }
    }

    /// Whether a channel id is well formed: APNs makes them as base64 of random bytes (length not fixed).
    static func isWellFormedChannelID(_ channelID: String) -> Bool {
        guard let bytes = Data(base64Encoded: channelID) else { return false }
        return !bytes.isEmpty
    }

    /// The `apns-request-id` to echo: the client's (which must be a UUID), else a new lowercase one.
    static func requestID(_ sent: String?) -> Result<String, SimulatorRejection> {
        guard let sent else { return .success(UUID().apnsIDString) }
        guard SimulatorRequestValidator.isCanonicalUUID(sent) else {
            return .failure(.init(status: 400, reason: "BadMessageId"))
        }
        return .success(sent)
    }

    /// The bundle id of a request on either API, whose path is `prefix` + bundle id + `suffix`; `nil` when the
    /// path is not of that form.
    static func bundleID(in path: Substring, prefix: String, suffix: String) -> String? {
        guard path.hasPrefix(prefix), path.hasSuffix(suffix), path.utf8.count > prefix.utf8.count + suffix.utf8.count
        else { return nil }
        let bundleID = path.dropFirst(prefix.utf8.count).dropLast(suffix.utf8.count)
        guard !bundleID.contains("/"), !bundleID.contains("?") else { return nil }
        return String(bundleID)
    }
}

/// The headers a broadcast send or a channel management request may carry, read in one pass.
struct BroadcastHeaders: Sendable, Hashable {
    var method: String?
    var path: String?
    var authorization: String?
    var channelID: String?
    var pushType: String?
    var expiration: String?
    var priority: String?
    var requestID: String?

    init(_ headers: HPACKHeaders) {
        for (name, value, _) in headers {
            switch name {
            case ":method": method = value
            case ":path": path = value
            case "authorization": authorization = value
            case "apns-channel-id": channelID = value
            case "apns-push-type": pushType = value
            case "apns-expiration": expiration = value
            case "apns-priority": priority = value
            case "apns-request-id": requestID = value
            default: break
            }
        }
    }
}
