import Foundation
import PGPushDevelopment
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// The bench rig's delaying TCP proxy (`--db-latency-ms`): PostgreSQL through it answers the same, one round
/// trip later per statement.
@Suite(.database, .timeLimit(.minutes(1)))
struct DelayingProxyTests {
    @Test func statementsThroughTheProxyAnswerTheSameOneRoundTripLater() async throws {
        try await TestDatabase.with { db in
            let proxy = try await DelayingTCPProxy(targetHost: db.url.host, targetPort: db.url.port, roundTrip: .milliseconds(40))
            defer { Task { await proxy.shutdown() } }
            var url = db.url
            url.host = "127.0.0.1"
            url.port = proxy.port
            let connection = try await PostgresConnection.connect(
                configuration: try url.connectionConfiguration(), id: 1, logger: db.logger)
            defer { Task { try? await connection.close() } }
            let clock = ContinuousClock()
            var timings: [Duration] = []
            for value in 1...5 {
                let started = clock.now
                let rows = try await connection.query("SELECT \(value)::int8 + 1", logger: db.logger).collect()
                timings.append(clock.now - started)
                #expect(try rows.first?.decode(Int64.self) == Int64(value) + 1)
            }
            // Each statement is one round trip of the extended protocol's pipelined messages.
            #expect(timings.allSatisfy { $0 >= .milliseconds(38) }, "\(timings)")
            #expect(timings.sorted()[2] < .milliseconds(400), "\(timings)")
        }
    }
}
