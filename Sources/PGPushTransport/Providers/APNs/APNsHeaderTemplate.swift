import Foundation
import NIOHPACK
import PGPushCore

/// The header fields of an APNs request that are the same for every device of a job (`apns-topic`,
/// `apns-push-type`, `apns-priority`, `apns-expiration`, `apns-collapse-id`), encoded once. Each device's
/// request then writes only its path, its `apns-id` and its body's length beside them: no string per field.
public struct APNsHeaderTemplate: Sendable, Hashable {
    private var shared = HTTP2HeaderBlock(reservingFields: 5, bytes: 128)

    public init(topic: String, pushType: PushType, priority: APNsPriority?, expiration: Int64?, collapseID: String?) {
        shared.add(name: "apns-topic", value: topic)
        shared.add(name: "apns-push-type", value: pushType.rawValue)
        if let priority { shared.add(name: "apns-priority", decimal: Int64(priority.rawValue)) }
        if let expiration { shared.add(name: "apns-expiration", decimal: expiration) }
        if let collapseID { shared.add(name: "apns-collapse-id", value: collapseID) }
    }

    public init(_ request: APNsRequest) {
        self.init(
            topic: request.topic, pushType: request.pushType, priority: request.priority, expiration: request.expiration,
            collapseID: request.collapseID)
    }

    /// One device's header block: `POST /3/device/<token>` with the shared fields, its id and its length.
    public func block(
        deviceToken: String, apnsID: UUID, contentLength: Int, authority: String, authorization: String?
    ) -> HTTP2HeaderBlock {
        var block = HTTP2HeaderBlock(
            reservingFields: 7 + shared.count,
            bytes: 160 + shared.bytes.count + deviceToken.utf8.count + authority.utf8.count + (authorization?.utf8.count ?? 0))
        block.add(name: ":method", value: "POST")
        block.add(name: ":scheme", value: "https")
        block.add(name: ":path", indexable: false) { bytes in
            bytes.append(contentsOf: "/3/device/".utf8)
            bytes.append(contentsOf: deviceToken.utf8)
        }
        block.add(name: ":authority", value: authority)
        if let authorization {
            // Indexable on purpose: the JWT is the same for ~50 minutes, so HPACK sends it once per connection.
            block.add(name: "authorization", value: authorization)
        }
        block.append(shared)
        block.add(name: "apns-id", indexable: false) { apnsID.appendAPNsID(to: &$0) }
        // Not indexed either: with per-device content each device's body has its own length.
        block.add(name: "content-length", decimal: Int64(contentLength), indexable: false)
        return block
    }
}

/// An APNs notification to one device of a job, its shared fields encoded once per job (``APNsHeaderTemplate``).
/// The dispatcher sends these; ``APNsRequest`` is the same request with every field its own.
public struct APNsDeviceRequest: PushRequest {
    public var template: APNsHeaderTemplate
    /// The hex device token; it goes into `:path` as `/3/device/<token>`.
    public var deviceToken: String
    public var apnsID: UUID
    /// The exact JSON bytes sent as the body.
    public var payload: [UInt8]

    public init(template: APNsHeaderTemplate, deviceToken: String, apnsID: UUID, payload: [UInt8]) {
        self.template = template
        self.deviceToken = deviceToken
        self.apnsID = apnsID
        self.payload = payload
    }

    public func headerBlock(authority: String, authorization: String?) -> HTTP2HeaderBlock {
        template.block(deviceToken: deviceToken, apnsID: apnsID, contentLength: payload.count, authority: authority, authorization: authorization)
    }

    public func headers(authority: String, authorization: String?) -> HPACKHeaders {
        headerBlock(authority: authority, authorization: authorization).hpackHeaders
    }

    public var body: [UInt8] { payload }

    public static var keepsResponseBody: Bool { false }
}
