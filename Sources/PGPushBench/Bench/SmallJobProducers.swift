import Foundation
import Logging
import PGPushCLISupport
import PGPushDevelopment
import PostgresNIO

/// The producers of `pgpush bench small-jobs` and `pgpush bench mixed`: one-user jobs enqueued the way an
/// application would, each through `push.enqueue(…, user_ids => ARRAY[u], priority => …)` on its own connections.
enum SmallJobProducers {
    /// `users.count` jobs from `producers` concurrent connections, each enqueueing its share in ONE transaction
    /// with one statement; returns the job ids. All connections are open before the first BEGIN.
    static func burst(rig: BroadcastRig, users: [String], producers: Int, priority: Int) async throws -> [Int64] {
        let shares = split(users, into: producers)
        let connections = try await open(shares.count, firstID: 100, rig: rig)
        let (appID, logger) = (rig.appID, rig.configuration.logger)
        return try await closing(connections) {
            try await withThrowingTaskGroup(of: [Int64].self) { group in
                for (connection, share) in zip(connections, shares) {
                    group.addTask {
                        try await enqueueInOneTransaction(share, priority: priority, appID: appID, on: connection, logger: logger)
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
        }
    }

    private static func enqueueInOneTransaction(
        _ users: [String], priority: Int, appID: String, on connection: PostgresConnection, logger: Logger
    ) async throws -> [Int64] {
        try await RigStore(connection: connection, logger: logger).enqueueOnePerUser(
            appID: appID, payload: BroadcastRig.payload, users: users, priority: priority)
    }

    /// What a paced run enqueued.
    struct Paced: Sendable {
        var jobIDs: [Int64]
        /// Jobs the schedule held (rate × duration); fewer are enqueued when the database falls behind by more
        /// than the schedule's length.
        var scheduled: Int
        /// From the schedule's start until the last connection was done.
        var seconds: Double
        /// The longest a job was enqueued after its due time.
        var maximumLagSeconds: Double
    }

    /// One job every 1/`rate` s for `duration` s: job i is due at start + i/rate, and a connection that is
    /// late enqueues at once (the schedule catches up). `connections` autocommit connections take the next job
    /// in turn, so one slow statement does not hold up the rest; nothing is enqueued after `duration`.
    static func paced(
        rig: BroadcastRig, users: [String], rate: Int, duration: Double, priority: Int, connections count: Int = 4
    ) async throws -> Paced {
        let connections = try await open(count, firstID: 200, rig: rig)
        let schedule = Schedule(
            users: users, rate: rate, duration: duration, priority: priority, appID: rig.appID,
            logger: rig.configuration.logger)
        let results = try await closing(connections) {
            try await withThrowingTaskGroup(of: (ids: [Int64], lag: Double).self) { group in
                for connection in connections {
                    group.addTask { try await schedule.produce(on: connection) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        return Paced(
            jobIDs: results.flatMap(\.ids), scheduled: users.count, seconds: (ContinuousClock.now - schedule.start).seconds,
            maximumLagSeconds: results.map(\.lag).max() ?? 0)
    }

    /// The paced producer's timetable, shared by its connections.
    private struct Schedule: Sendable {
        let users: [String]
        let rate: Int
        let priority: Int
        let appID: String
        let logger: Logger
        let start: ContinuousClock.Instant
        let end: ContinuousClock.Instant
        let tickets: Tickets

        init(users: [String], rate: Int, duration: Double, priority: Int, appID: String, logger: Logger) {
            (self.users, self.rate, self.priority, self.appID, self.logger) = (users, rate, priority, appID, logger)
            start = .now
            end = start + .seconds(fromOption: duration)
            tickets = Tickets(count: users.count)
        }

        /// Takes the next due job until the schedule is used up or over; returns the ids and the largest lag.
        func produce(on connection: PostgresConnection) async throws -> (ids: [Int64], lag: Double) {
            let database = RigStore(connection: connection, logger: logger)
            var ids: [Int64] = []
            var lag = 0.0
            while let index = await tickets.next() {
                let due = start + .seconds(fromOption: Double(index) / Double(rate))
                if due > .now { try await Task.sleep(until: due, clock: .continuous) }
                let now = ContinuousClock.now
                guard now < end else { break }
                lag = max(lag, (now - due).seconds)
                if let id = try await database.enqueue(
                    appID: appID, payload: BroadcastRig.payload, user: users[index], priority: priority) {
                    ids.append(id)
                }
            }
            return (ids, lag)
        }
    }

    /// `count` new connections to the rig's database; on failure the ones already open are closed.
    private static func open(_ count: Int, firstID: Int, rig: BroadcastRig) async throws -> [PostgresConnection] {
        var connections: [PostgresConnection] = []
        do {
            for index in 0..<count { connections.append(try await rig.openConnection(id: firstID + index)) }
            return connections
        } catch {
            for connection in connections { try? await connection.close() }
            throw error
        }
    }

    /// Runs `body`, then closes `connections` whether it succeeded or not.
    private static func closing<Result>(
        _ connections: [PostgresConnection], _ body: () async throws -> Result
    ) async throws -> Result {
        let result: Swift.Result<Result, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        for connection in connections { try? await connection.close() }
        return try result.get()
    }

    /// `items` in `parts` contiguous slices whose sizes differ by at most one (no empty slice).
    static func split<Item>(_ items: [Item], into parts: Int) -> [[Item]] {
        let parts = max(1, min(parts, items.count))
        let (size, extra) = items.count.quotientAndRemainder(dividingBy: parts)
        var slices: [[Item]] = []
        var lower = 0
        for part in 0..<parts {
            let upper = lower + size + (part < extra ? 1 : 0)
            slices.append(Array(items[lower..<upper]))
            lower = upper
        }
        return slices
    }
}

/// Hands out 0, 1, 2, … up to `count` − 1 to whichever producer asks next.
private actor Tickets {
    private let count: Int
    private var next_ = 0

    init(count: Int) { self.count = count }

    func next() -> Int? {
        guard next_ < count else { return nil }
        defer { next_ += 1 }
        return next_
    }
}
