/// The RFC 8030 §5.3 `Urgency` of a message: how soon the user agent needs it, which lets a device on battery
/// wait for a better moment to wake. Raw values are the header values.
///
/// A push service assumes `normal` when the header is absent, so a sender may leave it out for `normal`.
public enum WebPushUrgency: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// On power and Wi-Fi only (e.g. an advertisement).
    case veryLow = "very-low"
    /// On power or Wi-Fi (e.g. a topic update).
    case low
    /// On neither power nor Wi-Fi (e.g. a chat message).
    case normal
    /// Low battery too (e.g. an incoming call, a time-sensitive alert).
    case high

    /// The header's name.
    public static let headerName = "Urgency"

    public var description: String { rawValue }
}
