/// The values APNs accepts in the `apns-push-type` header.
public enum PushType: String, CaseIterable, Sendable, Hashable, Codable {
    case alert
    case background
    case location
    case voip
    case complication
    case fileprovider
    case mdm
    case liveactivity
    case pushtotalk
    case widgets

    /// The largest payload APNs accepts for this push type, in bytes.
    public var maximumPayloadBytes: Int {
        self == .voip ? 5120 : 4096
    }

    /// The suffix APNs requires on `apns-topic` for this push type, appended to the bundle id.
    public var topicSuffix: String {
        switch self {
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .location: ".location-query"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .alert, .background, .mdm: ""
        }
    }
}

/// The values APNs accepts in the `apns-priority` header.
public enum APNsPriority: Int, CaseIterable, Sendable, Hashable, Codable {
    /// Send now; needs an alert, sound or badge.
    case immediate = 10
    /// Power-aware; required for background pushes.
    case powerAware = 5
    /// Lowest.
    case lowest = 1
}

/// Which APNs service a credential and its device tokens belong to.
public enum APNsEnvironment: String, CaseIterable, Sendable, Hashable, Codable {
    case production
    case sandbox

    public var host: String {
        switch self {
        case .production: "api.push.apple.com"
        case .sandbox: "api.sandbox.push.apple.com"
        }
    }
}
