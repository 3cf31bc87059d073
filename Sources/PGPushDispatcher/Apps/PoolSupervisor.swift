import Logging
import PGPushCore
import PGPushStore
import PGPushTransport
import ServiceLifecycle
import Synchronization

/// Runs the app pools as child tasks of the worker's service group, so each ends with the worker. The
/// ``AppRegistry`` starts a pool when an app is first used and retires it when the app changes or goes idle.
final class PoolSupervisor: Service, Sendable {
    private struct Start: Sendable {
        let name: String
        let pool: any PushConnectionPool
        let retired: AsyncStream<Void>
    }

    private let starts: AsyncStream<Start>
    private let inbox: AsyncStream<Start>.Continuation
    /// Finishing a pool's stream retires it.
    private let running = Mutex<[String: AsyncStream<Void>.Continuation]>([:])
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
        (starts, inbox) = AsyncStream.makeStream(of: Start.self)
    }

    /// Starts running `pool` under `name` (an app and provider), retiring a pool that ran under it before.
    func start(_ pool: any PushConnectionPool, name: String) {
        let (retired, retire) = AsyncStream.makeStream(of: Void.self)
        running.withLock { $0.updateValue(retire, forKey: name) }?.finish()
        inbox.yield(Start(name: name, pool: pool, retired: retired))
    }

    /// Stops the pool running under `name`: its connections close.
    func retire(_ name: String) {
        running.withLock { $0.removeValue(forKey: name) }?.finish()
    }

    func run() async {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await start in starts {
                    group.addTask { await self.runPool(start) }
                }
                // Leaving the scope waits for the pools, which the shutdown retired.
            }
        } onGracefulShutdown: {
            // By now the chunks have finished sending: close every pool, and start none.
            self.inbox.finish()
            let all = self.running.withLock { running in
                defer { running = [:] }
                return Array(running.values)
            }
            for retire in all { retire.finish() }
        }
    }

    private func runPool(_ start: Start) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    try await start.pool.run()
                } catch is CancellationError {
                } catch {
                    self.logger.error("connection pool stopped", metadata: ["pool": "\(start.name)", "error": "\(LoggableError.describe(error))"])
                }
            }
            group.addTask { for await _ in start.retired {} }
            await group.next()
            group.cancelAll()
        }
    }
}
