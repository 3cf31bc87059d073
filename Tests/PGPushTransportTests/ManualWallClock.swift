import PGPushCore
import Synchronization
import struct Foundation.Date
import struct Foundation.TimeInterval

/// A clock that moves only when told to. Thread-safe. (A test double: production code uses `SystemWallClock`.)
final class ManualWallClock: WallClock {
    private let current: Mutex<Date>

    /// - Parameter start: The initial time; defaults to a fixed instant so tests are reproducible.
    init(_ start: Date = Date(timeIntervalSince1970: 1_700_000_000)) {
        current = Mutex(start)
    }

    func now() -> Date {
        current.withLock { $0 }
    }

    /// Moves the clock forward (or backward, with a negative interval).
    func advance(by interval: TimeInterval) {
        current.withLock { $0 = $0.addingTimeInterval(interval) }
    }

    func set(_ date: Date) {
        current.withLock { $0 = date }
    }
}
