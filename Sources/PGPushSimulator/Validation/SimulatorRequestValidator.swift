import Foundation
import NIOCore
import NIOHPACK
import PGPushCore

/// A rejection: HTTP status, the APNs `reason`, and for 410 the `timestamp`.
struct SimulatorRejection: Sendable, Hashable, Error {
    var status: Int
    var reason: String
    var timestampMilliseconds: Int64? = nil
}

/// The parts of a request that passed the shape checks.
struct ValidatedRequest: Sendable, Hashable {
    var token: String
    var topic: String?
    var apnsID: String?
    var bearerToken: String?
    var hasAuthorizationHeader: Bool
    var pushType: PushType? = nil
    /// `apns-priority`, when sent.
    var priority: Int? = nil
}

/// APNs' request-shape rules as a pure function: method, path, headers, payload. Authentication and the
/// token registry are checked afterwards, by the connection.
///
/// Choices where Apple documents no reason: a body that is not a JSON object is `400 PayloadEmpty` (it carries
/// no notification); a push-type whose required topic suffix is missing is `400 BadTopic`.
///
/// Live Activities (`apns-push-type: liveactivity`) have rules of their own: token authentication only
/// (`400 InvalidPushType` on a certificate connection), a topic ending in `.push-type.liveactivity` (a bare
/// bundle id is `400 DeviceTokenNotForTopic`, as clients observe), priority 5 or 10, and the payload rules of
/// ``LiveActivityPayloadRules``.
struct SimulatorRequestValidator: Sendable {
    var tokenHexLength: ClosedRange<Int>
    var allowedTopics: Set<String>?
    var disallowedTopics: Set<String> = []

    /// - Parameters:
    ///   - certificateTopics: `nil` for a token-auth connection; the certificate's topics (empty = any) otherwise.
    func validate(
        headers: HPACKHeaders,
        body: ByteBuffer,
        certificateTopics: [String]?
    ) -> Result<ValidatedRequest, SimulatorRejection> {
        var method: String?
        var path: String?
        var authorization: String?
        var topic: String?
        var pushTypeValue: String?
        var priority: String?
        var expiration: String?
        var collapseID: String?
        var apnsID: String?
        // One bit per APNs header seen, to spot duplicates without allocating.
        var seen: UInt16 = 0
        var duplicate = false
        func mark(_ bit: UInt16) {
            if seen & bit != 0 { duplicate = true }
            seen |= bit
        }

        for (name, value, _) in headers {
            switch name {
            case ":method": method = value
            case ":path": path = value
            case "authorization": authorization = value; mark(1 << 0)
            case "apns-topic": topic = value; mark(1 << 1)
            case "apns-push-type": pushTypeValue = value; mark(1 << 2)
            case "apns-priority": priority = value; mark(1 << 3)
            case "apns-expiration": expiration = value; mark(1 << 4)
            case "apns-collapse-id": collapseID = value; mark(1 << 5)
            case "apns-id": apnsID = value; mark(1 << 6)
            default: break
            }
        }

        guard method == "POST" else { return .failure(.init(status: 405, reason: "MethodNotAllowed")) }
        let prefix = "/3/device/"
        guard let path, path.hasPrefix(prefix) else { return .failure(.init(status: 404, reason: "BadPath")) }
        let rawToken = path.dropFirst(prefix.utf8.count)
        guard !rawToken.isEmpty else { return .failure(.init(status: 400, reason: "MissingDeviceToken")) }
        guard Self.isHex(rawToken), rawToken.utf8.count % 2 == 0, tokenHexLength.contains(rawToken.utf8.count) else {
            return .failure(.init(status: 400, reason: "BadDeviceToken"))
        }
        if duplicate { return .failure(.init(status: 400, reason: "DuplicateHeaders")) }

        var pushType: PushType?
        if let pushTypeValue {
            guard let parsed = PushType(rawValue: pushTypeValue) else {
                return .failure(.init(status: 400, reason: "InvalidPushType"))
            }
            pushType = parsed
        }

        if pushType == .liveactivity, certificateTopics != nil {
            return .failure(.init(status: 400, reason: "InvalidPushType"))
        }
        if let certificateTopics {
            if topic == nil { topic = certificateTopics.first }
            if let topic, !certificateTopics.isEmpty, !certificateTopics.contains(topic) {
                return .failure(.init(status: 400, reason: "TopicDisallowed"))
            }
        } else {
            guard let topic else { return .failure(.init(status: 400, reason: "MissingTopic")) }
            guard !topic.isEmpty, !topic.contains(" ") else { return .failure(.init(status: 400, reason: "BadTopic")) }
        }
        if let topic, pushType == .liveactivity, !topic.hasSuffix(PushType.liveactivity.topicSuffix) {
            return .failure(.init(status: 400, reason: "DeviceTokenNotForTopic"))
        }
        if let topic, let pushType, !pushType.topicSuffix.isEmpty, !topic.hasSuffix(pushType.topicSuffix) {
            return .failure(.init(status: 400, reason: "BadTopic"))
        }
        if let topic, disallowedTopics.contains(topic) {
            return .failure(.init(status: 400, reason: "TopicDisallowed"))
        }
        if let topic, let allowedTopics, certificateTopics == nil {
            let bundleID = pushType.map { String(topic.dropLast($0.topicSuffix.count)) } ?? topic
            if !allowedTopics.contains(topic) && !allowedTopics.contains(bundleID) {
                return .failure(.init(status: 400, reason: "TopicDisallowed"))
            }
        }
        if let priority, priority != "10", priority != "5", priority != "1" {
            return .failure(.init(status: 400, reason: "BadPriority"))
        }
        if pushType == .liveactivity, let priority, priority == "1" {
            return .failure(.init(status: 400, reason: "BadPriority"))
        }
        if let expiration, Int64(expiration).map({ $0 < 0 }) ?? true {
            return .failure(.init(status: 400, reason: "BadExpirationDate"))
        }
        if let collapseID, collapseID.utf8.count > 64 {
            return .failure(.init(status: 400, reason: "BadCollapseId"))
        }
        if let apnsID, !Self.isCanonicalUUID(apnsID) {
            return .failure(.init(status: 400, reason: "BadMessageId"))
        }

        let limit = (pushType ?? .alert).maximumPayloadBytes
        guard body.readableBytes > 0 else { return .failure(.init(status: 400, reason: "PayloadEmpty")) }
        guard body.readableBytes <= limit else { return .failure(.init(status: 413, reason: "PayloadTooLarge")) }
        guard Self.looksLikeJSONObject(body) else { return .failure(.init(status: 400, reason: "PayloadEmpty")) }
        if pushType == .liveactivity, let rejection = LiveActivityPayloadRules.check(body, endpoint: .device) {
            return .failure(rejection)
        }

        return .success(ValidatedRequest(
            token: rawToken.lowercased(), topic: topic, apnsID: apnsID,
            bearerToken: ProviderTokenSession.bearerToken(authorization),
            hasAuthorizationHeader: authorization != nil, pushType: pushType, priority: priority.flatMap { Int($0) }))
    }

    static func isHex(_ text: Substring) -> Bool {
        text.utf8.allSatisfy(isHexByte)
    }

    static func isHexByte(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) || (byte >= 0x41 && byte <= 0x46)
    }

    /// `8-4-4-4-12` hex digits with hyphens, the form APNs requires for `apns-id`.
    static func isCanonicalUUID(_ text: String) -> Bool {
        UUID(apnsIDString: text) != nil
    }

    /// A cheap structural check that the payload is a JSON object; full parsing would cost more than the
    /// rest of the request at benchmark rates.
    static func looksLikeJSONObject(_ body: ByteBuffer) -> Bool {
        body.withUnsafeReadableBytes { bytes in
            let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }
            guard let first = bytes.firstIndex(where: { !isSpace($0) }),
                  let last = bytes.lastIndex(where: { !isSpace($0) }) else { return false }
            return bytes[first] == UInt8(ascii: "{") && bytes[last] == UInt8(ascii: "}")
        }
    }
}
