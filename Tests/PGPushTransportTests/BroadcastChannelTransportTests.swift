import Foundation
import Logging
import PGPushCore
import PGPushSimulator
import PGPushTransport
import Testing

/// The Live Activity broadcast requests through the project's own client (HTTP2ConnectionPool) against the
/// simulator: the channel management port with a provider token, and broadcasts on the device port.
@Suite("APNs transport: broadcast channels and broadcasts", .serialized, .network)
struct BroadcastChannelTransportTests {
    static let bundleID = "com.example.pgpush"
    static let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":2}}}"#.utf8)

    /// A started simulator, a pool on its channel management port and one on its device port.
    private static func withPools<T: Sendable>(
        engine: HTTP2Engine,
        configure: (inout APNsSimulatorConfiguration) -> Void = { _ in },
        channelBodyLimit: Int = 4096,
        _ body: @Sendable (_ channels: HTTP2ConnectionPool, _ device: HTTP2ConnectionPool, APNsSimulator) async throws -> T
    ) async throws -> T {
        let key = TransportTestKey()
        var configuration = TransportTest.simulatorConfiguration(key: key)
        configure(&configuration)
        let simulator = APNsSimulator(configuration: configuration, logger: TransportTest.logger)
        let devicePort = try await simulator.start()
        do {
            let channelsPort = try #require(simulator.channelsPort)
            #expect(channelsPort != devicePort)
            var channelsConfiguration = TransportTest.clientConfiguration(port: channelsPort, caFile: simulator.caCertificatePath, engine: engine)
            channelsConfiguration.maximumResponseBodyBytes = channelBodyLimit
            let tokens = try key.tokenSource()
            let channels = try HTTP2ConnectionPool(
                configuration: channelsConfiguration, credentials: .token(tokens), logger: TransportTest.logger)
            let device = try HTTP2ConnectionPool(
                configuration: TransportTest.clientConfiguration(port: devicePort, caFile: simulator.caCertificatePath, engine: engine),
                credentials: .token(tokens), logger: TransportTest.logger)
            let result = try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask { try await channels.run(); return nil }
                group.addTask { try await device.run(); return nil }
                let result = try await body(channels, device, simulator)
                group.cancelAll()
                while let next = try await group.next() { _ = next }
                return result
            }
            await simulator.shutdown()
            return result
        } catch {
            await simulator.shutdown()
            throw error
        }
    }

    private static func response(_ outcome: ProviderOutcome) throws -> ProviderResponse {
        guard case .response(let response) = outcome else {
            Issue.record("no response: \(outcome)")
            throw NoResponse()
        }
        return response
    }

    struct NoResponse: Error {}

    private static func channelRequest(_ operation: APNsChannelRequest.Operation, bundleID: String = bundleID) -> APNsChannelRequest {
        APNsChannelRequest(bundleID: bundleID, operation: operation, requestID: UUID())
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func channelRoundTripThenBroadcast(engine: HTTP2Engine) async throws {
        try await Self.withPools(engine: engine) { channels, device, simulator in
            let requestID = UUID()
            let created = try Self.response(await channels.send(
                APNsChannelRequest(bundleID: Self.bundleID, operation: .create(storagePolicy: 1), requestID: requestID)))
            #expect(created.status == 201)
            let channelID = try #require(created.channelID)
            #expect(simulator.channels.ids(bundleID: Self.bundleID) == [channelID])
            #expect(simulator.channels.storagePolicy(of: channelID) == 1)

            let read = try Self.response(await channels.send(Self.channelRequest(.read(channelID: channelID))))
            #expect(read.status == 200)
            let settings = try JSONSerialization.jsonObject(with: Data(read.body)) as? [String: Any]
            #expect(settings?["message-storage-policy"] as? Int == 1)
            #expect(settings?["push-type"] as? String == "LiveActivity")

            let listed = try Self.response(await channels.send(Self.channelRequest(.listAll)))
            #expect(listed.status == 200)
            #expect(APNsChannelList.parse(listed.body) == [channelID])

            // A broadcast on the device port, with a future expiration (policy 1 stores it).
            let broadcastID = UUID()
            let broadcast = APNsBroadcastRequest(
                bundleID: Self.bundleID, channelID: channelID, priority: .powerAware, expiration: 1_900_000_000,
                requestID: broadcastID, payload: Self.update)
            let sent = try Self.response(await device.send(broadcast))
            #expect(sent.status == 200)
            #expect(sent.reason == nil)
            let entry = try #require(simulator.broadcastLedger.first)
            #expect(entry.bundleID == Self.bundleID)
            #expect(entry.channelID == channelID)
            #expect(entry.priority == 5)
            #expect(entry.expiration == 1_900_000_000)
            #expect(entry.payload == Self.update)

            let deleted = try Self.response(await channels.send(Self.channelRequest(.delete(channelID: channelID))))
            #expect(deleted.status == 204)
            let gone = try Self.response(await channels.send(Self.channelRequest(.read(channelID: channelID))))
            #expect(gone.status == 400)
            #expect(gone.reason == "ChannelNotRegistered", "an APNs reason is parsed even from a kept body")
            #expect(APNsChannelList.parse(try Self.response(await channels.send(Self.channelRequest(.listAll))).body) == [])

            // Broadcasting to the deleted channel: the reason comes back through the device pool too.
            let late = try Self.response(await device.send(broadcast))
            #expect(late.status == 400)
            #expect(late.reason == "ChannelNotRegistered")
            #expect(simulator.broadcastLedger.count == 1)

            let methods = simulator.channels.requests.map { "\($0.method) \($0.status)" }
            #expect(methods == ["POST 201", "GET 200", "GET 200", "DELETE 204", "GET 400", "GET 200"])
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func storagePolicyZeroTakesOnlyExpirationZero(engine: HTTP2Engine) async throws {
        try await Self.withPools(engine: engine) { channels, device, simulator in
            let created = try Self.response(await channels.send(Self.channelRequest(.create(storagePolicy: 0))))
            let channelID = try #require(created.channelID)
            func broadcast(expiration: Int64) -> APNsBroadcastRequest {
                APNsBroadcastRequest(bundleID: Self.bundleID, channelID: channelID, priority: .immediate,
                                     expiration: expiration, requestID: UUID(), payload: Self.update)
            }
            let stored = try Self.response(await device.send(broadcast(expiration: 1_900_000_000)))
            #expect(stored.status == 400)
            #expect(stored.reason == "BadExpirationDate")
            #expect(try Self.response(await device.send(broadcast(expiration: 0))).status == 200)
            #expect(simulator.broadcastLedger.map(\.expiration) == [0])
        }
    }

    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func injectedErrorsComeFirstThenSuccess(engine: HTTP2Engine) async throws {
        try await Self.withPools(engine: engine) { channels, device, simulator in
            simulator.updateFaults {
                $0.channelManagement.failFirst = 2
                $0.channelManagement.status = 429
                $0.broadcast.failFirst = 1
            }
            var statuses: [String] = []
            for _ in 0..<3 {
                let answer = try Self.response(await channels.send(Self.channelRequest(.create(storagePolicy: 1))))
                statuses.append("\(answer.status) \(answer.reason ?? "-")")
            }
            #expect(statuses == ["429 TooManyRequests", "429 TooManyRequests", "201 -"])
            let channelID = try #require(simulator.channels.ids(bundleID: Self.bundleID).first)
            let broadcast = APNsBroadcastRequest(bundleID: Self.bundleID, channelID: channelID, priority: .immediate,
                                                 expiration: 0, requestID: UUID(), payload: Self.update)
            let first = try Self.response(await device.send(broadcast))
            #expect(first.status == 503)
            #expect(first.reason == "ServiceUnavailable")
            #expect(try Self.response(await device.send(broadcast)).status == 200)
            #expect(simulator.channels.requests.map(\.status) == [429, 429, 201])
        }
    }

    /// A list longer than one stream window (65,535 bytes) arrives whole: the client returns stream credit.
    @Test(.timeLimit(.minutes(1)), arguments: TransportTest.engines)
    func longChannelListArrivesWhole(engine: HTTP2Engine) async throws {
        try await Self.withPools(engine: engine, channelBodyLimit: 1 << 20) { channels, _, simulator in
            for _ in 0..<4000 { simulator.channels.create(bundleID: Self.bundleID, storagePolicy: 0) }
            let listed = try Self.response(await channels.send(Self.channelRequest(.listAll)))
            #expect(listed.status == 200)
            #expect(listed.body.count > 65_535)
            let parsed = APNsChannelList.parse(listed.body)
            #expect(parsed?.count == 4000)
            let sameIDsInOrder = parsed == simulator.channels.ids(bundleID: Self.bundleID)
            #expect(sameIDsInOrder)
        }
    }
}
