import NIOCore
import NIOPosix
import Synchronization

/// A wait that a signal ends early: the relay's poll (woken by NOTIFY or a shutdown) and its backoffs (woken by
/// a shutdown only). A signal with nobody waiting is kept for the next wait, so none is lost between two waits;
/// many coalesce into one.
///
/// The timeout is an event-loop timer that an early end cancels: a cancelled `Task.sleep` would stay scheduled
/// until its time came.
final class RelayWake: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
        var timer: Scheduled<Void>?
        var generation = 0
    }

    private let state = Mutex(State())
    private let eventLoop: any EventLoop

    init(eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any()) {
        self.eventLoop = eventLoop
    }

    /// Ends the current wait, or the next one if nobody waits.
    func signal() {
        let ended = state.withLock { state -> (CheckedContinuation<Void, Never>, Scheduled<Void>?)? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            defer {
                state.waiter = nil
                state.timer = nil
            }
            return (waiter, state.timer)
        }
        guard let (waiter, timer) = ended else { return }
        timer?.cancel()
        waiter.resume()
    }

    /// Returns after `timeout`, at a signal, or when the task is cancelled, whichever comes first.
    func wait(upTo timeout: Duration) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let generation = state.withLock { state -> Int? in
                    if state.pending {
                        state.pending = false
                        return nil
                    }
                    state.generation += 1
                    state.waiter = continuation
                    return state.generation
                }
                guard let generation else {
                    continuation.resume()
                    return
                }
                let (seconds, attoseconds) = timeout.components
                let amount = TimeAmount.nanoseconds(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
                let timer = eventLoop.scheduleTask(in: amount) { self.expire(generation) }
                let stale = state.withLock { state -> Bool in
                    guard state.generation == generation, state.waiter != nil else { return true }
                    state.timer = timer
                    return false
                }
                if stale { timer.cancel() }
            }
        } onCancel: {
            signal()
        }
    }

    private func expire(_ generation: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.generation == generation, let waiter = state.waiter else { return nil }
            state.waiter = nil
            state.timer = nil
            return waiter
        }
        waiter?.resume()
    }
}
