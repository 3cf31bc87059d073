import Foundation
import Synchronization

/// One request to the broadcast channel management API, as the simulator answered it.
public struct SimulatorChannelRequest: Sendable, Hashable {
    /// `POST`, `GET`, `DELETE`, or whatever the client sent.
    public var method: String
    /// The `:path`, as sent.
    public var path: String
    public var status: Int
    /// APNs' `reason`; `nil` on success.
    public var reason: String?
    /// When it arrived (the simulator's clock).
    public var receivedAt: Date
}

/// The broadcast channels the simulated APNs knows, per bundle id, and every management request it answered.
/// Thread-safe.
///
/// Tests read it to check what a client did, and change it to set a scene: ``create(bundleID:storagePolicy:)``
/// makes a channel without a request, ``delete(_:)`` removes one behind the client's back (as the developer
/// portal does when the Broadcast capability is switched off).
public final class SimulatorChannels: Sendable {
    private struct Channel {
        var bundleID: String
        var storagePolicy: Int
    }

    private struct State {
        var channels: [String: Channel] = [:]
        /// Ids per bundle id, oldest first.
        var idsByBundle: [String: [String]] = [:]
        /// Every id ever made, live or deleted: APNs never reuses one.
        var issued: Set<String> = []
        var requests: [SimulatorChannelRequest] = []
    }

    private let state = Mutex(State())

    init() {}

    /// The live channels of a bundle id, oldest first.
    public func ids(bundleID: String) -> [String] {
        state.withLock { $0.idsByBundle[bundleID] ?? [] }
    }

    /// A live channel's message storage policy (0 or 1); `nil` for an unknown or deleted id.
    public func storagePolicy(of channelID: String) -> Int? {
        state.withLock { $0.channels[channelID]?.storagePolicy }
    }

    /// The bundle id a live channel belongs to; `nil` for an unknown or deleted id.
    public func bundleID(of channelID: String) -> String? {
        state.withLock { $0.channels[channelID]?.bundleID }
    }

    /// Makes a channel as a test's setup, without a request and regardless of the channel limit; returns its id.
    @discardableResult
    public func create(bundleID: String, storagePolicy: Int) -> String {
        state.withLock { Self.insert(into: &$0, bundleID: bundleID, storagePolicy: storagePolicy) }
    }

    /// Deletes a channel behind the client's back; its id stays unknown to APNs from now on.
    public func delete(_ channelID: String) {
        state.withLock { Self.remove(channelID, from: &$0) }
    }

    /// Every management request answered so far, in order.
    public var requests: [SimulatorChannelRequest] { state.withLock { $0.requests } }

    // MARK: For the management API

    /// Makes a channel unless the bundle id already has `limit`; `nil` then.
    func create(bundleID: String, storagePolicy: Int, limit: Int) -> String? {
        state.withLock { state in
            guard (state.idsByBundle[bundleID]?.count ?? 0) < limit else { return nil }
            return Self.insert(into: &state, bundleID: bundleID, storagePolicy: storagePolicy)
        }
    }

    /// A live channel's storage policy if it belongs to `bundleID`; `nil` otherwise (unknown, deleted, or
    /// another app's: APNs answers `ChannelNotRegistered` to all three).
    func storagePolicy(of channelID: String, bundleID: String) -> Int? {
        state.withLock { state in
            state.channels[channelID].flatMap { $0.bundleID == bundleID ? $0.storagePolicy : nil }
        }
    }

    /// Deletes the channel if it belongs to `bundleID`; `false` when there is no such channel.
    func delete(_ channelID: String, bundleID: String) -> Bool {
        state.withLock { state in
            guard state.channels[channelID]?.bundleID == bundleID else { return false }
            Self.remove(channelID, from: &state)
            return true
        }
    }

    func record(_ request: SimulatorChannelRequest) {
        state.withLock { $0.requests.append(request) }
    }

    private static func insert(into state: inout State, bundleID: String, storagePolicy: Int) -> String {
        var id = newID()
        while state.issued.contains(id) { id = newID() }
        state.issued.insert(id)
        state.channels[id] = Channel(bundleID: bundleID, storagePolicy: storagePolicy)
        state.idsByBundle[bundleID, default: []].append(id)
        return id
    }

    private static func remove(_ channelID: String, from state: inout State) {
        guard let channel = state.channels.removeValue(forKey: channelID) else { return }
        state.idsByBundle[channel.bundleID]?.removeAll { $0 == channelID }
    }

    /// Random, like APNs' ids: base64 of 16 bytes.
    private static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return Data(bytes).base64EncodedString()
    }
}
