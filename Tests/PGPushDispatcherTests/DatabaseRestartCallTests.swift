import Foundation
import Logging
import PGPushCore
import PGPushDevelopment
import PostgresNIO
@testable import PGPushStore
import Synchronization
import Testing

extension EndToEndTests.DatabaseOutageTests {
    /// A worker has dozens of statements in flight when PostgreSQL restarts (a fast shutdown, up again a second
    /// later). Those the restart catches fail, whether they were running, about to be written to a connection
    /// the server had just closed, or waiting for a connection; those made once it is back succeed. None waits
    /// out the 25-second deadline, which held a SIGTERMed worker's drain for as long.
    @Test func callsCaughtByAFastRestartFailPromptlyAndLaterOnesSucceed() async throws {
        let cluster = try ThrowawayPostgres.start()
        defer { cluster.stop() }
        let logger = { var logger = Logger(label: "pgpush.test"); logger.logLevel = .error; return logger }()
        let client = PostgresClient(
            configuration: try DatabaseURL(cluster.url).clientConfiguration(maximumConnections: 8), backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            let store = QueueStore(client: client, workerID: "w", logger: logger)
            let restartedAt = RestartMark()
            let stopLoad = ContinuousClock.now + .seconds(12)
            struct Loop: Sendable { var slowest = Duration.zero; var failures = 0; var successesAfterRestart = 0 }
            // Half the loops run transactions, half single statements: both lease a connection of the pool.
            let loops = try await withThrowingTaskGroup(of: Loop.self) { load in
                for index in 0..<40 {
                    load.addTask {
                        var loop = Loop()
                        while ContinuousClock.now < stopLoad {
                            let started = ContinuousClock.now
                            do {
                                if index.isMultiple(of: 2) {
                                    try await store.transaction { connection in
                                        try await connection.query("SELECT pg_sleep(0.005)", logger: logger)
                                    }
                                } else {
                                    try await store.run("SELECT pg_sleep(0.005)")
                                }
                                if let restarted = restartedAt.instant.withLock({ $0 }), started > restarted { loop.successesAfterRestart += 1 }
                            } catch {
                                loop.failures += 1
                                try await Task.sleep(for: .milliseconds(20))
                            }
                            loop.slowest = max(loop.slowest, ContinuousClock.now - started)
                        }
                        return loop
                    }
                }
                try await Task.sleep(for: .seconds(3))
                try cluster.stopServer()
                try await Task.sleep(for: .seconds(1))
                try cluster.startServer()
                restartedAt.instant.withLock { $0 = .now }
                return try await load.reduce(into: [Loop]()) { $0.append($1) }
            }
            let slowest = loops.map(\.slowest).max() ?? .zero
            #expect(slowest < .seconds(6), "the slowest call took \(slowest)")
            #expect(loops.map(\.failures).reduce(0, +) > 0, "the restart caught no call")
            #expect(loops.allSatisfy { $0.successesAfterRestart > 0 }, "\(loops.map(\.successesAfterRestart))")
        }
    }
}

/// When the server was started again, for calls to tell whether they began after it.
private final class RestartMark: Sendable {
    let instant = Mutex<ContinuousClock.Instant?>(nil)
}
