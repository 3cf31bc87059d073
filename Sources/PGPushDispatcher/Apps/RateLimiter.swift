import PGPushCore
import Synchronization

/// This worker's share of an app's fleet-wide `rate_limit`: the limit divided by the number of live workers,
/// enforced with a token bucket. Senders wait for their turn; nothing is dropped.
public final class RateLimiter: Sendable {
    private struct State {
        var bucket: TokenBucket
        var fleetRate: Double
        var liveWorkers: Int
    }

    private let state: Mutex<State>

    public init(fleetRatePerSecond: Double, liveWorkers: Int) {
        let share = fleetRatePerSecond / Double(max(1, liveWorkers))
        state = Mutex(State(bucket: TokenBucket(ratePerSecond: share, burst: Self.burst(for: share)),
                            fleetRate: fleetRatePerSecond, liveWorkers: max(1, liveWorkers)))
    }

    /// A small burst keeps the rate smooth at every time scale, which is what APNs and the ±10 % promise need.
    static func burst(for share: Double) -> Double { max(1, share / 20) }

    /// Re-divides the fleet rate when the app's limit or the number of live workers changes.
    public func update(fleetRatePerSecond: Double, liveWorkers: Int) {
        state.withLock { state in
            let workers = max(1, liveWorkers)
            guard state.fleetRate != fleetRatePerSecond || state.liveWorkers != workers else { return }
            state.fleetRate = fleetRatePerSecond
            state.liveWorkers = workers
            let share = fleetRatePerSecond / Double(workers)
            state.bucket.setRate(share, burst: Self.burst(for: share))
        }
    }

    public var sharePerSecond: Double {
        state.withLock { $0.fleetRate / Double($0.liveWorkers) }
    }

    /// Waits until one more notification may be sent.
    public func acquire() async throws {
        let wait = state.withLock { $0.bucket.take(1, now: .now) }
        if let wait {
            try await Task.sleep(for: wait)
        }
    }
}
