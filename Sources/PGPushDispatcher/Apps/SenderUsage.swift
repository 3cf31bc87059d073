import Synchronization

/// Who is using an app's sender right now, and since when nobody is: an idle pool is closed, a pool in use
/// never is. The registry checks a sender out (under its own isolation, so a close can never race a check-out)
/// and the chunk checks it back in when it is done.
final class SenderUsage: Sendable {
    private struct State {
        var users = 0
        var idleSince: ContinuousClock.Instant
    }

    private let state: Mutex<State>

    init(now: ContinuousClock.Instant = .now) {
        state = Mutex(State(idleSince: now))
    }

    func checkOut() {
        state.withLock { $0.users += 1 }
    }

    func checkIn(now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            state.users -= 1
            if state.users == 0 { state.idleSince = now }
        }
    }

    /// True when nobody has used the sender for at least `timeout` before `now`.
    func isIdle(for timeout: Duration, now: ContinuousClock.Instant) -> Bool {
        state.withLock { $0.users == 0 && now - $0.idleSince >= timeout }
    }
}
