import Foundation

/// The body of a successful `GET /1/apps/<bundle id>/all-channels`: `{"channels": ["<id>", …]}`.
public enum APNsChannelList {
    private struct Wire: Decodable {
        var channels: [String]
    }

    /// The channel ids, in APNs' order; `nil` when the body is not that shape (not JSON, no `channels` array,
    /// an id that is not a string), for instance a body cut short by the pool's response size limit.
    public static func parse(_ body: [UInt8]) -> [String]? {
        try? JSONDecoder().decode(Wire.self, from: Data(body)).channels
    }
}
