import PGPushCore
import PGPushDispatcher
import PGPushStore
import Synchronization

/// A sender source with the senders a test made: one per app (and platform), around a ``FakePushPool``. An app
/// without one is unknown, so its chunks are given back unsent, as with an app whose credential cannot be used.
public final class FakeAppSenders: AppSenders {
    private struct Key: Hashable {
        var appID: String
        var platform: DevicePlatform
    }

    private struct State {
        var senders: [Key: AppSender] = [:]
        var liveWorkers = 1
        var checkOuts = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// Adds the sender of `app` around `pool`, with the app's rate limit (``AppRecord/rateLimit``) and an in-flight
    /// limit from `initialInFlight` up to `maximumInFlight`; returns it.
    @discardableResult
    public func add(
        _ app: AppRecord, pool: FakePushPool, platform: DevicePlatform = .ios, initialInFlight: Int = 16,
        maximumInFlight: Int = 1000
    ) -> AppSender {
        state.withLock { state in
            let sender = AppSender(app: app, platform: platform, pool: pool, liveWorkers: state.liveWorkers,
                                   initialInFlight: initialInFlight, maximumInFlight: maximumInFlight)
            state.senders[Key(appID: app.id, platform: platform)] = sender
            return sender
        }
    }

    /// The sender of an app, to look at its gate and limits.
    public func sender(of appID: String, platform: DevicePlatform = .ios) -> AppSender? {
        state.withLock { $0.senders[Key(appID: appID, platform: platform)] }
    }

    /// Check-outs so far.
    public var checkOuts: Int { state.withLock(\.checkOuts) }
    /// The live workers the heartbeat reported last.
    public var liveWorkers: Int { state.withLock(\.liveWorkers) }

    public func checkOutSender(for appID: String, platform: DevicePlatform, role: SenderRole) async -> AppSender? {
        let sender = state.withLock { state -> AppSender? in
            guard let sender = state.senders[Key(appID: appID, platform: platform)] else { return nil }
            state.checkOuts += 1
            return sender
        }
        sender?.checkOut()
        return sender
    }

    public func throttles() -> [String: AppThrottle] {
        state.withLock { state in
            var throttles: [String: AppThrottle] = [:]
            for (key, sender) in state.senders {
                let throttle = sender.throttle
                if throttle.ratePerSecond != nil || throttle.backoffConcurrency != nil { throttles[key.appID] = throttle }
            }
            return throttles
        }
    }

    public func setLiveWorkers(_ count: Int) async {
        state.withLock { state in
            state.liveWorkers = max(1, count)
            for sender in state.senders.values {
                if let rate = sender.app.rateLimit {
                    sender.rateLimiter?.update(fleetRatePerSecond: Double(rate), liveWorkers: state.liveWorkers)
                }
            }
        }
    }

    public func update(apps: [String: AppRecord]) async {}

    public func closeIdlePools(idleFor timeout: Duration, now: ContinuousClock.Instant) async -> [String] { [] }

    public func activePools() async -> [(appID: String, provider: String, pool: any PushConnectionPool)] {
        state.withLock { state in
            state.senders.map { ($0.key.appID, $0.key.platform.provider.rawValue, $0.value.pool) }
        }
    }
}
