import Foundation
import PGPushCLISupport
import PGPushDevelopment
import PostgresNIO
import Synchronization

/// The one-token jobs of `pgpush bench soak`: job i is due at start + i/rate, for `duration` seconds, each
/// `push.enqueue(…, user_ids => ARRAY[u], priority => …)` in its own autocommit statement to the next user of a
/// fixed pool, from `connections` connections that take the next due job in turn (a late job goes at once).
///
/// Unlike the paced producer of `bench mixed` it outlives the database: a statement that fails (the server is
/// restarting) is counted as an enqueue error, its connection is closed and opened again after a pause, and
/// the schedule goes on. Such a job may or may not have committed; the soak's audit reads what is in
/// `push.jobs`, so it is checked either way.
final class SoakProducer: Sendable {
    struct Counters: Sendable {
        /// Statements that returned a job id.
        var enqueued = 0
        /// Statements or connection attempts that failed.
        var errors = 0
        /// The longest a job was enqueued after its due time.
        var maximumLagSeconds = 0.0
    }

    private let counters = Mutex(Counters())
    let rate: Int
    let duration: Double
    let priority: Int
    let users: [String]
    let connections: Int

    init(rate: Int, duration: Double, priority: Int, users: [String], connections: Int = 4) {
        (self.rate, self.duration, self.priority, self.users, self.connections) = (rate, duration, priority, users, connections)
    }

    var snapshot: Counters { counters.withLock { $0 } }

    /// Runs the schedule from `start` to `start + duration`; returns when it is over or the task is cancelled.
    func run(rig: BroadcastRig, start: ContinuousClock.Instant) async {
        let total = max(Int((Double(rate) * duration).rounded(.down)), 1)
        let tickets = SoakTickets(count: total)
        let end = start + .seconds(fromOption: duration)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<connections {
                group.addTask { await self.produce(rig: rig, id: 300 + index, tickets: tickets, start: start, end: end) }
            }
        }
    }

    private func produce(rig: BroadcastRig, id: Int, tickets: SoakTickets, start: ContinuousClock.Instant, end: ContinuousClock.Instant) async {
        var connection: PostgresConnection?
        // Unstructured because a `defer` cannot await: the connection closes after the producer has returned.
        defer { if let connection { Task { try? await connection.close() } } }
        while let index = await tickets.next() {
            let due = start + .seconds(fromOption: Double(index) / Double(rate))
            do {
                if due > .now { try await Task.sleep(until: due, clock: .continuous) }
            } catch { return }
            let now = ContinuousClock.now
            guard now < end, !Task.isCancelled else { return }
            counters.withLock { $0.maximumLagSeconds = max($0.maximumLagSeconds, (now - due).seconds) }
            do {
                if connection?.isClosed ?? true {
                    try? await connection?.close()
                    connection = nil
                    connection = try await rig.openConnection(id: id)
                }
                let store = RigStore(connection: connection!, logger: rig.configuration.logger)
                if try await store.enqueue(
                    appID: rig.appID, payload: BroadcastRig.payload, user: users[index % users.count], priority: priority) != nil {
                    counters.withLock { $0.enqueued += 1 }
                } else {
                    counters.withLock { $0.errors += 1 }
                }
            } catch {
                counters.withLock { $0.errors += 1 }
                try? await connection?.close()
                connection = nil
                // The server is likely down: pause this connection; the others and the schedule go on.
                do { try await Task.sleep(for: .milliseconds(250)) } catch { return }
            }
        }
    }
}

/// Hands out 0, 1, 2, … up to `count` − 1 to whichever connection asks next.
private actor SoakTickets {
    private let count: Int
    private var next_ = 0

    init(count: Int) { self.count = count }

    func next() -> Int? {
        guard next_ < count else { return nil }
        defer { next_ += 1 }
        return next_
    }
}
