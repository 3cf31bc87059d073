import Foundation
import Synchronization

/// The time of day and the chance the worker reads: when a token was sent, whether a job has expired, when a
/// retry is due and the jitter of its backoff. ``system`` reads the system's clock and random numbers; a test
/// passes a clock it moves by hand and a seeded generator (PGPushDispatcherTesting's `TestClock` and
/// `SeededRandom`), so its retries and expiries are exact.
public struct WorkerRuntime: Sendable {
    /// The current time of day.
    public var now: @Sendable () -> Date
    /// A uniformly random 64-bit number.
    public var random: @Sendable () -> UInt64

    public init(now: @escaping @Sendable () -> Date, random: @escaping @Sendable () -> UInt64) {
        self.now = now
        self.random = random
    }

    /// The system's clock and random numbers.
    public static let system = WorkerRuntime(now: { Date() }, random: {
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    })

    /// A generator that draws from ``random``, for APIs that take a `RandomNumberGenerator`.
    var generator: Generator { Generator(draw: random) }

    struct Generator: RandomNumberGenerator {
        let draw: @Sendable () -> UInt64
        mutating func next() -> UInt64 { draw() }
    }
}
