import Foundation
import Logging
import PGPushDispatcher
import PGPushStore
import PostgresNIO
import ServiceLifecycle

/// A `Worker` run inside the test process, against a fleet's database and simulator: its real services, a real
/// PostgreSQL client and TLS HTTP/2 to the simulator, without starting a process.
struct InProcessWorker: Sendable {
    let worker: Worker
    let group: ServiceGroup

    /// Asks for a graceful shutdown, as SIGTERM would.
    func shutDown() async { await group.triggerGracefulShutdown() }
}

extension Fleet {
    /// The configuration `pgpush worker` gets from ``startWorker(_:id:apnsCAFile:databaseUser:databaseURL:logFormat:logLevel:)``.
    func workerConfiguration(id: String) -> WorkerConfiguration {
        var configuration = WorkerConfiguration()
        configuration.workerID = id
        configuration.apnsEndpointOverride = "https://localhost:\(port)"
        configuration.apnsCAFile = simulator.caCertificatePath
        configuration.maintenanceInterval = .seconds(1)
        configuration.requestTimeout = .seconds(60)
        return configuration
    }

    /// Runs a worker in this process while `body` runs, then shuts it down gracefully (if `body` did not) and
    /// returns how long the shutdown took after it was asked for.
    @discardableResult
    func withWorker(
        id: String = "in-process-\(UUID().uuidString.prefix(6))",
        configure: @Sendable (inout WorkerConfiguration) -> Void = { _ in },
        _ body: @Sendable (InProcessWorker) async throws -> Void
    ) async throws -> Duration {
        var configuration = workerConfiguration(id: id)
        configure(&configuration)
        var logger = Logger(label: "pgpush.test.worker")
        logger.logLevel = .warning
        let url = try DatabaseURL(db.urlString)
        let client = PostgresClient(configuration: try url.clientConfiguration(maximumConnections: configuration.databaseConnections), backgroundLogger: logger)
        let worker = Worker(configuration: configuration, client: client, listener: client, logger: logger)
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: client), .init(service: worker, successTerminationBehavior: .gracefullyShutdownGroup)],
            logger: logger))
        let running = InProcessWorker(worker: worker, group: group)
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do {
                try await body(running)
            } catch {
                await running.shutDown()
                try? await tasks.waitForAll()
                throw error
            }
            let asked = ContinuousClock.now
            await running.shutDown()
            try await tasks.waitForAll()
            return ContinuousClock.now - asked
        }
    }

    /// Polls `query` (a count) until `done` says so, or fails after `timeout`.
    func waitUntil(
        _ query: PostgresQuery, timeout: Duration = .seconds(60), _ done: @Sendable (Int64) -> Bool
    ) async throws -> Int64 {
        let deadline = ContinuousClock.now + timeout
        while true {
            let value = try await count(query)
            if done(value) { return value }
            guard ContinuousClock.now < deadline else { throw WaitTimedOut(query: query.sql, last: value) }
            try await Task.sleep(for: .milliseconds(25))
        }
    }
}

struct WaitTimedOut: Error, CustomStringConvertible {
    var query: String
    var last: Int64
    var description: String { "timed out waiting on \(query) (last: \(last))" }
}
