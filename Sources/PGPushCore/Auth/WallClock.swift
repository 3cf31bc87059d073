import Synchronization
import struct Foundation.Date
import struct Foundation.TimeInterval

/// Wall-clock time, injected wherever a decision depends on dates (provider-token age, expiry, retry times).
public protocol WallClock: Sendable {
    func now() -> Date
}

/// The system's wall clock.
public struct SystemWallClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}

/// A clock that moves only when told to, for tests in any module. Thread-safe.
public final class ManualWallClock: WallClock {
    private let current: Mutex<Date>

    /// - Parameter start: The initial time; defaults to a fixed instant so tests are reproducible.
    public init(_ start: Date = Date(timeIntervalSince1970: 1_700_000_000)) {
        current = Mutex(start)
    }

    public func now() -> Date {
        current.withLock { $0 }
    }

    /// Moves the clock forward (or backward, with a negative interval).
    public func advance(by interval: TimeInterval) {
        current.withLock { $0 = $0.addingTimeInterval(interval) }
    }

    public func set(_ date: Date) {
        current.withLock { $0 = date }
    }
}
