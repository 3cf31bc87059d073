import Foundation
import PGPushStore
import PGPushTestSupport
import Testing

/// Cells: apps pinned to independent databases, each with its own worker fleet. A worker serves the database
/// it is given and nothing else, so two cells side by side deliver each its own jobs, once.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(4)))
    struct CellTests {
        @Test func twoCellsEachWithItsOwnFleetDeliverOnlyTheirOwnApps() async throws {
            try await Fleet.with { east in
                try await Fleet.with { west in
                    try await east.createApp("news-east")
                    try await west.createApp("news-west")
                    try await east.registerDevices(1500, app: "news-east", prefix: "ea")
                    try await west.registerDevices(1000, app: "news-west", prefix: "eb")
                    // Each cell's fleet: two workers on the east database, one on the west, all through PgBouncer.
                    let eastWorkers = try (0..<2).map { _ in
                        try east.startWorker(["--listen-database-url", try east.db.sessionPooledURLString()], databaseURL: try east.db.pooledURLString())
                    }
                    let westWorker = try west.startWorker(["--listen-database-url", try west.db.sessionPooledURLString()], databaseURL: try west.db.pooledURLString())
                    let eastJob = try await east.enqueue(app: "news-east")
                    let westJob = try await west.enqueue(app: "news-west")
                    #expect(try await east.waitForJob(eastJob, timeout: .seconds(90)) == "done")
                    #expect(try await west.waitForJob(westJob, timeout: .seconds(90)) == "done")
                    for worker in eastWorkers { await worker.stop() }
                    await westWorker.stop()
                    #expect(east.simulator.ledger.acceptedCount == 1500)
                    #expect(west.simulator.ledger.acceptedCount == 1000)
                    #expect(east.simulator.ledger.entries.allSatisfy { $0.token.hasPrefix("ea") })
                    #expect(west.simulator.ledger.entries.allSatisfy { $0.token.hasPrefix("eb") })
                    #expect(try await east.count("SELECT count(*) FROM push.workers") == 0, "the east fleet left its registry")
                    #expect(try await east.count("SELECT count(*) FROM push.deliveries") == 1500)
                    #expect(try await west.count("SELECT count(*) FROM push.deliveries") == 1000)
                }
            }
        }
    }
}
