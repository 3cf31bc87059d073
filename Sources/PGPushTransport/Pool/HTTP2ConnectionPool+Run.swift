import Logging
import NIOCore
import PGPushCore
import ServiceLifecycle

extension HTTP2ConnectionPool {
    /// Keeps the configured number of connections open until graceful shutdown or cancellation, then fails
    /// waiting callers, lets in-flight streams finish (bounded by the request timeout) and closes every connection.
    public func run() async throws {
        let slots = max(1, configuration.connectionsPerPool)
        await withDiscardingTaskGroup { group in
            group.addTask { await self.rejections.deliver() }
            await withGracefulShutdownHandler {
                await withTaskCancellationHandler {
                    await withDiscardingTaskGroup { group in
                        for slot in 0..<slots {
                            group.addTask { await self.maintainConnection(slot: slot) }
                        }
                    }
                } onCancel: {
                    self.beginShutdown()
                }
            } onGracefulShutdown: {
                self.beginShutdown()
            }
            beginShutdown()
            await drainAndClose()
            // Streams still open after the drain were closed with their connections; their rejected tokens
            // are reported before run() returns.
            rejections.finish()
        }
    }

    private var isShuttingDown: Bool { state.withLock { $0.machine.isShuttingDown } }

    /// One slot of the pool: connect, serve until the connection retires, replace it; back off after failures
    /// and after connections that die young, so the provider never sees rapid connect/close churn.
    private func maintainConnection(slot: Int) async {
        var consecutiveFailures = 0
        var isFirstAttempt = true
        while !isShuttingDown {
            let isReplacement = !isFirstAttempt
            isFirstAttempt = false
            let started = ContinuousClock.now
            let eventLoop = eventLoopGroup.next()
            let attempt = HTTP2PoolResources.Attempt(
                ready: eventLoop.makePromise(of: Void.self), retired: eventLoop.makePromise(of: Void.self))
            let (ready, retired) = (attempt.ready, attempt.retired)
            let id = state.withLock { state in
                let id = state.machine.connectRequested(isReplacement: isReplacement)
                state.attempts[id] = attempt
                return id
            }
            do {
                let connection = try await HTTP2Connection.connect(
                    id: id,
                    endpoint: configuration.endpoint,
                    sslContext: sslContext,
                    eventLoop: eventLoop,
                    connectTimeout: configuration.connectTimeout,
                    requestTimeout: .nanoseconds(configuration.requestTimeout.nanosecondsInt64),
                    proxy: configuration.proxy,
                    logger: logger
                ) { [self] event in
                    self.handle(event, connectionID: id)
                }
                attach(connection)
                // The handshake and the server's SETTINGS must also finish within the connect timeout.
                let timeout = eventLoop.scheduleTask(in: .nanoseconds(configuration.connectTimeout.nanosecondsInt64)) {
                    ready.fail(HTTP2ConnectFailure(detail: "no HTTP/2 SETTINGS within the connect timeout"))
                    connection.close()
                }
                defer { timeout.cancel() }
                try await ready.futureResult.get()
                timeout.cancel()
                startPinging(connection)
                logger.debug(
                    "\(configuration.provider) connection ready",
                    metadata: ["provider": "\(configuration.provider)", "connection": "\(id)", "slot": "\(slot)"])
                try? await retired.futureResult.get()
                let lifetime = ContinuousClock.now - started
                consecutiveFailures = lifetime < .seconds(10) ? consecutiveFailures + 1 : 0
            } catch {
                consecutiveFailures += 1
                recordConnectFailure(id: id, failure: error as? HTTP2ConnectFailure ?? HTTP2ConnectFailure(
                    detail: String(describing: error), tlsRejection: TLSRejection.reason(for: error)),
                    quietly: error is HTTPProxyError)
            }
            if consecutiveFailures > 0, !isShuttingDown {
                await sleepUnlessShuttingDown(configuration.reconnectBackoff.delay(afterFailures: consecutiveFailures - 1))
            }
        }
    }

    private func attach(_ connection: HTTP2Connection) {
        let effects = state.withLock { state in
            // Held before the event, so the actions it returns (a lease, a close) can name it.
            state.connections[connection.id] = connection
            return state.resolve(state.machine.connectionAttached(connection.id))
        }
        perform(effects)
    }

    private func recordConnectFailure(id: Int, failure: HTTP2ConnectFailure, quietly: Bool = false) {
        // A proxy's refusal is logged by its HTTPProxyStatus, once every few seconds for every pool.
        logger.log(
            level: quietly ? .debug : .warning,
            "\(configuration.provider) connection attempt failed",
            metadata: ["provider": "\(configuration.provider)", "error": "\(failure.tlsRejection ?? failure.detail)"])
        apply { $0.connectFailed(id, failure) }
    }

    private func startPinging(_ connection: HTTP2Connection) {
        let interval = TimeAmount.nanoseconds(configuration.pingInterval.nanosecondsInt64)
        let id = connection.id
        let task = connection.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            self.pingDue(id)
        }
        connection.channel.closeFuture.whenComplete { _ in task.cancel() }
    }

    private func sleepUnlessShuttingDown(_ duration: Duration) async {
        let deadline = ContinuousClock.now + duration
        while !isShuttingDown, ContinuousClock.now < deadline {
            let step = min(deadline - ContinuousClock.now, .milliseconds(50))
            try? await Task.sleep(for: step)
        }
    }

    /// Stops new work: fails waiting callers and retires every connection (each closes when its last stream ends).
    func beginShutdown() {
        apply { $0.shutdown() }
    }

    private func drainAndClose() async {
        let deadline = ContinuousClock.now + configuration.requestTimeout + .seconds(1)
        while ContinuousClock.now < deadline, !Task.isCancelled {
            if state.withLock({ $0.machine.isEmpty }) { return }
            try? await Task.sleep(for: .milliseconds(20))
        }
        let leftovers = state.withLock { state in Array(state.connections.values) }
        for connection in leftovers { connection.close() }
        for connection in leftovers { try? await connection.channel.closeFuture.get() }
    }
}
