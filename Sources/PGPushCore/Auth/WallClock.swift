import struct Foundation.Date

/// Wall-clock time, injected wherever a decision depends on dates (provider-token age, expiry, retry times).
public protocol WallClock: Sendable {
    func now() -> Date
}

/// The system's wall clock.
public struct SystemWallClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}
