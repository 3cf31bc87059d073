import struct Foundation.Date
import struct Foundation.UUID

/// One notification to one device token: everything the transport needs to build an HTTP/2 request.
public struct APNsRequest: Sendable, Hashable {
    /// The hex device token; it goes into `:path` as `/3/device/<token>`.
    public var deviceToken: String
    /// The full `apns-topic`, including any push-type suffix.
    public var topic: String
    public var pushType: PushType
    /// `nil` omits the header, which APNs reads as 10.
    public var priority: APNsPriority?
    /// `apns-expiration` as UNIX seconds; `nil` omits the header, `0` means deliver once with no storage.
    public var expiration: Int64?
    public var collapseID: String?
    /// Deterministic per (job, token) so a re-send carries the same id (see ``DeliveryID``).
    public var apnsID: UUID
    /// The exact JSON bytes sent as the body.
    public var payload: [UInt8]

    public init(
        deviceToken: String,
        topic: String,
        pushType: PushType = .alert,
        priority: APNsPriority? = nil,
        expiration: Int64? = nil,
        collapseID: String? = nil,
        apnsID: UUID,
        payload: [UInt8]
    ) {
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
    }
}
