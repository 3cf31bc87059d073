import Foundation
import Synchronization

/// One broadcast the simulator accepted (answered 200).
public struct SimulatorBroadcastEntry: Sendable, Hashable {
    /// The bundle id of the path.
    public var bundleID: String
    /// The `apns-channel-id` header.
    public var channelID: String
    /// The `apns-priority` header: 10, 5 or 1.
    public var priority: Int
    /// The `apns-expiration` header: UNIX seconds, or 0.
    public var expiration: Int64
    /// The body, byte for byte.
    public var payload: [UInt8]
    /// When it arrived (the simulator's clock).
    public var receivedAt: Date
}

/// Every accepted broadcast, in order. Thread-safe. Broadcasts are few (one reaches every subscriber), so
/// unlike the device ledger it keeps whole payloads.
final class SimulatorBroadcastLedger: Sendable {
    private let entries = Mutex<[SimulatorBroadcastEntry]>([])

    var all: [SimulatorBroadcastEntry] { entries.withLock { $0 } }

    func record(_ entry: SimulatorBroadcastEntry) {
        entries.withLock { $0.append(entry) }
    }
}
