import Foundation
import PGPushCore
import PGPushSimulator
import PGPushTransport
import Testing

@Suite("APNs transport over TLS: closing", .serialized, .network)
struct TransportCloseTests {
    /// A pool that stops closes its connections, each after a GOAWAY of its own: the server learns that no new
    /// stream will come instead of seeing the connection simply drop.
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func everyConnectionSendsItsGoAwayBeforeItCloses(engine: HTTP2Engine) async throws {
        let key = TransportTestKey()
        let simulator = APNsSimulator(configuration: TransportTest.simulatorConfiguration(key: key), logger: TransportTest.logger)
        let port = try await simulator.start()
        do {
            let pool = try HTTP2ConnectionPool(
                configuration: TransportTest.clientConfiguration(port: port, caFile: simulator.caCertificatePath, connections: 2, engine: engine),
                credentials: .token(try key.tokenSource()),
                logger: TransportTest.logger
            )
            await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await pool.run() }
                #expect(await pool.send(TransportTest.request(token: TransportTest.randomToken())).status == 200)
                #expect(await Self.poll { pool.statistics.connectionsReady == 2 }, "\(pool.statistics)")
                #expect(simulator.statistics.goAwaysReceived == 0)
                group.cancelAll()
                while (try? await group.next()) != nil {}
            }
            #expect(await Self.poll { simulator.statistics.goAwaysReceived == 2 }, "GOAWAYs received: \(simulator.statistics.goAwaysReceived)")
        } catch {
            await simulator.shutdown()
            throw error
        }
        await simulator.shutdown()
    }

    private static func poll(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }
}
