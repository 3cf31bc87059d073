import Foundation
import NIOHPACK
import PGPushCore

/// One Live Activity update sent to every subscriber of a broadcast channel (iOS 18):
/// `POST /4/broadcasts/apps/<bundle id>`. One request reaches all of them, whatever their number.
///
/// It goes to the ordinary APNs host and port (what node-apn and APNSwift do; Apple's own examples disagree
/// on the host), so it shares the device pool. It carries no device token and no `apns-topic`: the bundle id
/// is in the path, the channel in `apns-channel-id`. A 200 has an empty body.
public struct APNsBroadcastRequest: PushRequest, Sendable, Hashable {
    /// The bare bundle id; a push-type suffix is refused with `TopicDisallowed`.
    public var bundleID: String
    /// The channel's id as APNs made it (base64).
    public var channelID: String
    /// 10, 5 or 1; APNs requires the header on this endpoint.
    public var priority: APNsPriority
    /// `apns-expiration` as UNIX seconds; `0` stores nothing. A channel created with storage policy 0 accepts
    /// only `0` (`BadExpirationDate`).
    public var expiration: Int64
    /// Sent as `apns-request-id`; APNs echoes it.
    public var requestID: UUID
    /// The exact JSON bytes sent as the body (an update's or end's `aps`), at most 5120 bytes.
    public var payload: [UInt8]

    public init(bundleID: String, channelID: String, priority: APNsPriority, expiration: Int64, requestID: UUID,
                payload: [UInt8]) {
        self.bundleID = bundleID
        self.channelID = channelID
        self.priority = priority
        self.expiration = expiration
        self.requestID = requestID
        self.payload = payload
    }

    public func headers(authority: String, authorization: String?) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(11)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        // The same for every broadcast of an app: worth indexing, unlike a device path.
        headers.add(name: ":path", value: "/4/broadcasts/apps/\(bundleID)")
        headers.add(name: ":authority", value: authority)
        if let authorization { headers.add(name: "authorization", value: authorization) }
        // A channel gets many updates in a row, but ids are many and long-lived tables would churn: not indexed,
        // like apns-id on device requests.
        headers.add(name: "apns-channel-id", value: channelID, indexing: .nonIndexable)
        headers.add(name: "apns-push-type", value: PushType.liveactivity.rawValue)
        headers.add(name: "apns-expiration", value: String(expiration))
        headers.add(name: "apns-priority", value: String(priority.rawValue))
        headers.add(name: "apns-request-id", value: requestID.apnsIDString, indexing: .nonIndexable)
        headers.add(name: "content-length", value: String(payload.count))
        return headers
    }

    public var body: [UInt8] { payload }

    /// A broadcast's answer is an empty 200 or an APNs `{"reason": …}`, parsed by the transport.
    public static var keepsResponseBody: Bool { false }
}
