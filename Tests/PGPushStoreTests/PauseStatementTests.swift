import Foundation
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The worker and `pgpush apps pause` send the same pause statement: an operator's pause replaces the reason,
/// the worker's automatic pauses (safety valve, credential failures) never overwrite one.
@Suite(.database, .timeLimit(.minutes(3)))
struct PauseStatementTests {
    @Test func anOperatorPauseReplacesTheReasonAndAWorkerPauseKeepsIt() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news")
            let worker = QueueStore(client: db.client, workerID: "w", logger: db.logger)
            func reason() async throws -> String? {
                try await db.exec("SELECT paused_reason FROM push.apps WHERE id = 'news'").first?.decode(String?.self)
            }
            try await db.client.withConnection { (connection: PostgresConnection) async throws in
                let operatorStore = OperatorStore(connection: connection, logger: db.logger)
                #expect(try await operatorStore.pauseApp("news", reason: "key rotation"))
                #expect(try await !worker.pauseApp("news", reason: "BadDeviceToken safety valve"))
                #expect(try await reason() == "key rotation")
                #expect(try await operatorStore.pauseApp("news", reason: "certificate expired"))
                #expect(try await reason() == "certificate expired")
                #expect(try await operatorStore.resumeApp("news") == true)
                #expect(try await worker.pauseApp("news", reason: "BadDeviceToken safety valve"))
                #expect(try await reason() == "BadDeviceToken safety valve")
                #expect(try await !operatorStore.pauseApp("nope", reason: "x"))
                #expect(try await operatorStore.resumeApp("nope") == nil)
            }
        }
    }
}
