import Foundation
import PGPushDispatcher
import Synchronization

/// A wall clock that moves only when a test moves it, with timers that fire as it passes them: the time the
/// worker reads (``runtime``), the leases and retry times of ``InMemoryWorkerStore``, and the delayed answers
/// of ``FakePushPool`` all follow it, so a test of a lease running out or a retry falling due never sleeps.
public final class TestClock: Sendable {
    private struct Timer {
        var id: Int
        var due: Date
        var action: @Sendable () -> Void
    }

    private struct State {
        var now: Date
        var timers: [Timer] = []
        var nextID = 0
    }

    private let state: Mutex<State>

    /// A clock at `now`; by default a fixed instant, so runs are repeatable.
    public init(now: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        state = Mutex(State(now: now))
    }

    /// The clock's time.
    public var now: Date { state.withLock(\.now) }

    /// Moves the clock on by `duration` and runs, in order of their due time, the timers it passes.
    public func advance(by duration: Duration) {
        let target = state.withLock { $0.now }.addingTimeInterval(duration.seconds)
        while true {
            let next = state.withLock { state -> Timer? in
                guard let index = state.timers.indices.min(by: { state.timers[$0].due < state.timers[$1].due }),
                      state.timers[index].due <= target else { return nil }
                let timer = state.timers.remove(at: index)
                state.now = max(state.now, timer.due)
                return timer
            }
            guard let next else { break }
            next.action()
        }
        state.withLock { $0.now = max($0.now, target) }
    }

    /// Runs `action` once the clock has moved `delay` past now (at once for a delay of zero or less).
    public func schedule(after delay: Duration, _ action: @escaping @Sendable () -> Void) {
        guard delay > .zero else { return action() }
        state.withLock { state in
            state.timers.append(Timer(id: state.nextID, due: state.now.addingTimeInterval(delay.seconds), action: action))
            state.nextID += 1
        }
    }

    /// Timers not yet due.
    public var pendingTimers: Int { state.withLock(\.timers.count) }

    /// The worker's runtime on this clock, drawing its random numbers from `random`.
    public func runtime(random: SeededRandom = SeededRandom(seed: 1)) -> WorkerRuntime {
        WorkerRuntime(now: { self.now }, random: { random.next() })
    }
}

/// Repeatable random numbers (SplitMix64): the same seed gives the same backoff jitter on every run.
public final class SeededRandom: Sendable {
    private let state: Mutex<UInt64>

    public init(seed: UInt64) {
        state = Mutex(seed)
    }

    public func next() -> UInt64 {
        state.withLock { state in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// A source that always draws `value`: `.max` takes the whole of a full-jitter window. (Not 0: a bounded
    /// draw rejects it and draws again, forever.)
    public static func constant(_ value: UInt64) -> WorkerRuntimeRandom { { value } }
}

/// A random source as ``WorkerRuntime`` takes it.
public typealias WorkerRuntimeRandom = @Sendable () -> UInt64

extension Duration {
    /// The duration in seconds, with its fraction.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
