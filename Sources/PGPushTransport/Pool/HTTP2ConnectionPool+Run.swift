import PGPushCore
import ServiceLifecycle

extension HTTP2ConnectionPool {
    /// Keeps the configured number of connections open until graceful shutdown or cancellation, then fails
    /// waiting callers, lets in-flight streams finish (bounded by the request timeout) and closes every connection.
    ///
    /// One event stream drives it: the state machine's ``HTTP2PoolStateMachine/Action/openConnection(_:)``
    /// and ``HTTP2PoolStateMachine/Action/scheduleTimer(_:)`` become tasks of this run's group, and the stream
    /// ends with ``HTTP2PoolStateMachine/Action/shutdownComplete``.
    public func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.rejections.deliver() }
            apply { $0.start(slots: configuration.connectionsPerPool) }
            await withGracefulShutdownHandler {
                await withTaskCancellationHandler {
                    for await event in events {
                        switch event {
                        case .openConnection(let id):
                            state.withLock { _ = $0.unopened.remove(id) }
                            group.addTask { await self.openConnection(id) }
                        case .runTimer(let timer):
                            group.addTask { await self.runTimer(timer) }
                        }
                    }
                } onCancel: {
                    self.apply { $0.shutdown(force: true) }
                }
            } onGracefulShutdown: {
                self.beginShutdown()
            }
            // Cancelled, the stream ends early: connections it never started are given up, and the ones
            // closing are waited for.
            let unopened = state.withLock { state in
                defer { state.unopened.removeAll() }
                return state.unopened.sorted()
            }
            for id in unopened {
                apply { $0.connectFailed(id, HTTP2ConnectFailure(detail: "the connection pool stopped before connecting")) }
            }
            await shutdownComplete()
            // Streams still open after the drain were closed with their connections; their rejected tokens
            // are reported before run() returns.
            rejections.finish()
        }
    }

    /// Stops new work: fails waiting callers and retires every connection (each closes when its last stream
    /// ends, or when the drain deadline passes).
    func beginShutdown() {
        apply { $0.shutdown() }
    }

    private func openConnection(_ id: Int) async {
        do {
            let connection = try await factory.makeConnection(id: id) { [self] event in
                self.handle(event, connectionID: id)
            }
            let effects = state.withLock { state in
                // Held before the event, so the actions it returns (a lease, a close) can name it.
                state.connections[connection.id] = connection
                return state.resolve(state.machine.connectionAttached(connection.id))
            }
            perform(effects)
        } catch {
            let failure = error as? HTTP2ConnectFailure ?? HTTP2ConnectFailure(detail: String(describing: error))
            apply { $0.connectFailed(id, failure) }
        }
    }

    /// Sleeps on the pool's clock for the timer, unless the state machine cancels it first.
    private func runTimer(_ timer: HTTP2PoolStateMachine.Timer) async {
        let fired = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                do {
                    try await self.clock.sleep(for: timer.duration)
                    return true
                } catch {
                    return false
                }
            }
            group.addTask {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    if !self.state.withLock({ $0.armTimer(timer.id, continuation) }) { continuation.resume() }
                }
                return false
            }
            let fired = await group.next() ?? false
            // Whichever came first, the other ends: the sleep is cancelled, the cancellation wait released.
            group.cancelAll()
            state.withLock { $0.releaseTimer(timer.id) }?.resume()
            return fired
        }
        if fired { timerFired(timer) }
    }

    private func shutdownComplete() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state in
                if state.machine.isShutDown { return true }
                state.shutdownWaiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }
}
