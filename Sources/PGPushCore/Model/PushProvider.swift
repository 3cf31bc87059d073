/// A push provider, spelled one way everywhere: the raw value is the name logs, metrics and the database use
/// (`apns`, `fcm`), and ``displayName`` is how a message to a person writes it ("APNs", "FCM").
public enum PushProvider: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Apple Push Notification service: pushes to devices, and the channel management service beside them.
    case apns
    /// Firebase Cloud Messaging HTTP v1.
    case fcm
    /// APNs' Live Activity channel broadcasts: one request per job, labelled apart from device pushes in the
    /// sends metric.
    case apnsBroadcast = "apns-broadcast"
    /// Web Push (RFC 8030): browsers' push services, each origin its own.
    case webpush

    /// The name in a message to a person: "APNs", "FCM", "APNs broadcast".
    public var displayName: String {
        switch self {
        case .apns: "APNs"
        case .fcm: "FCM"
        case .apnsBroadcast: "APNs broadcast"
        case .webpush: "Web Push"
        }
    }

    /// The raw value, so an interpolated provider reads as logs and metrics label it.
    public var description: String { rawValue }
}
