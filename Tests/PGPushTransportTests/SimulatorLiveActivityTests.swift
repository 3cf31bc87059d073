import Foundation
import PGPushSimulator
import Testing

extension SimulatorHarness {
    /// A raw client on the broadcast channel management port.
    func connectChannels(clientCertificate: (certificate: String, key: String)? = nil) async throws -> SimulatorRawClient {
        try await SimulatorRawClient.connect(port: try #require(simulator.channelsPort), caPath: simulator.caCertificatePath,
                                             clientCertificate: clientCertificate)
    }

    /// Headers of a channel management request with this harness's provider token.
    func channelHeaders(_ extra: [(String, String)] = []) -> [(String, String)] {
        [("authorization", "bearer \(jwt)")] + extra
    }
}

/// Live Activities against the simulator with the raw client: per-token validation, the channel management
/// API's every answer, and broadcasts.
@Suite("APNs simulator: Live Activities", .network)
struct SimulatorLiveActivityTests {
    static let bundle = SimulatorHarness.topic
    static let channels = "/1/apps/\(bundle)/channels"
    static let creation = #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":1}}}"#
    static let start = #"{"aps":{"timestamp":1700000000,"event":"start","alert":{"title":"Kick-off"},"attributes-type":"MatchAttributes","attributes":{"match":7},"content-state":{"score":0}}}"#

    // MARK: Per-token pushes

    @Test(.timeLimit(.minutes(1)))
    func liveActivityPushesAreValidatedLikeAPNs() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let path = "/3/device/" + SimulatorHarness.token(41)
            let topic = Self.bundle + ".push-type.liveactivity"
            func send(topic: String = topic, priority: String? = "5", body: String) async throws -> SimulatorRawClient.Outcome {
                var headers = [("authorization", "bearer \(harness.jwt)"), ("apns-topic", topic), ("apns-push-type", "liveactivity")]
                if let priority { headers.append(("apns-priority", priority)) }
                return try await client.request(path: path, headers: headers, body: body)
            }
            #expect(try await send(body: Self.update).status == 200)
            #expect(try await send(priority: nil, body: Self.start).status == 200)
            let entries = harness.simulator.ledger.entries
            #expect(entries.map(\.pushType) == ["liveactivity", "liveactivity"])
            #expect(entries.map(\.priority) == [5, nil])

            #expect(try await send(body: #"{"aps":{"event":"update","content-state":{}}}"#).reason == "BadRequestPayload")
            #expect(try await send(body: #"{"aps":{"timestamp":1700000000,"event":"resume","content-state":{}}}"#).reason
                == "BadRequestPayload")
            #expect(try await send(body: #"{"aps":{"timestamp":1700000000,"event":"start","alert":"Go","content-state":{}}}"#).reason
                == "BadRequestPayload")
            #expect(try await send(topic: Self.bundle, body: Self.update).reason == "DeviceTokenNotForTopic")
            #expect(try await send(priority: "1", body: Self.update).reason == "BadPriority")
            #expect(try await send(body: "{\"aps\":{},\"pad\":\"" + String(repeating: "x", count: 4100) + "\"}").status == 413)
            #expect(harness.simulator.ledger.acceptedCount == 2)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func certificateConnectionsCannotPushLiveActivitiesButManageChannels() async throws {
        let certificates = try TransportTestCertificates()
        defer { try? FileManager.default.removeItem(atPath: certificates.directory) }
        try await SimulatorHarness.with(configure: { $0.clientCertificateCAFile = certificates.caCertificate }) { harness in
            let identity = (certificates.clientCertificate, certificates.clientKey)
            let client = try await harness.connect(clientCertificate: identity)
            let refused = try await client.request(
                path: "/3/device/" + SimulatorHarness.token(42),
                headers: [("apns-topic", Self.bundle + ".push-type.liveactivity"), ("apns-push-type", "liveactivity")],
                body: Self.update)
            #expect(refused.status == 400)
            #expect(refused.reason == "InvalidPushType")
            await client.close()

            let management = try await harness.connectChannels(clientCertificate: identity)
            let created = try await management.request(path: Self.channels, headers: [], body: Self.creation)
            #expect(created.status == 201)
            await management.close()
        }
    }

    // MARK: Channel management

    @Test(.timeLimit(.minutes(1)))
    func channelManagementAnswersLikeAPNs() async throws {
        try await SimulatorHarness.with(configure: { $0.channelLimit = 2 }) { harness in
            let client = try await harness.connectChannels()
            defer { Task { await client.close() } }
            func send(_ method: String, _ extra: [(String, String)] = [], path: String = Self.channels,
                      body: String? = nil, auth: Bool = true) async throws -> SimulatorRawClient.Outcome {
                try await client.request(method: method, path: path, headers: auth ? harness.channelHeaders(extra) : extra, body: body)
            }

            #expect(try await send("POST", body: Self.creation, auth: false).reason == "MissingProviderToken")
            let requestID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
            let created = try await send("POST", [("apns-request-id", requestID)], body: Self.creation)
            #expect(created.status == 201)
            guard case .response(_, let headers, let body) = created else { return }
            let channelID = try #require(headers["apns-channel-id"])
            #expect(Data(base64Encoded: channelID)?.count == 16)
            #expect(headers["apns-request-id"] == requestID)
            #expect(body.isEmpty)

            let read = try await send("GET", [("apns-channel-id", channelID)])
            #expect(read.status == 200)
            if case .response(_, let headers, let body) = read {
                #expect(body == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
                #expect(UUID(uuidString: headers["apns-request-id"] ?? "") != nil, "made when the client sent none")
            }
            let listed = try await send("GET", path: "/1/apps/\(Self.bundle)/all-channels")
            if case .response(let status, _, let body) = listed {
                #expect(status == 200)
                #expect(body == #"{"channels":["\#(channelID)"]}"#)
            }

            #expect(try await send("GET").reason == "MissingChannelId")
            #expect(try await send("GET", [("apns-channel-id", "bm90LWEtY2hhbm5lbA==")]).reason == "ChannelNotRegistered")
            #expect(try await send("GET", [("apns-channel-id", "%%%")]).reason == "BadChannelId")
            #expect(try await send("GET", [("apns-channel-id", channelID)], path: "/1/apps/com.example.other/channels").reason
                == "ChannelNotRegistered", "another bundle's channel")
            #expect(try await send("POST", body: nil).reason == "PayloadEmpty")
            #expect(try await send("POST", body: "{not json").reason == "BadRequestPayload")
            #expect(try await send("POST", body: #"{"message-storage-policy":1,"push-type":"LiveActivity","x":1}"#).reason
                == "BadRequestParams")
            #expect(try await send("POST", body: #"{"message-storage-policy":1}"#).reason == "MissingPushType")
            #expect(try await send("POST", body: #"{"message-storage-policy":1,"push-type":"Alert"}"#).reason == "InvalidPushType")
            #expect(try await send("POST", path: "/1/apps/\(Self.bundle).push-type.liveactivity/channels", body: Self.creation).reason
                == "TopicDisallowed")
            #expect(try await send("POST", [("apns-request-id", "not-a-uuid")], body: Self.creation).reason == "BadMessageId")
            let wrongMethod = try await send("PUT", body: Self.creation)
            #expect(wrongMethod.status == 405)
            #expect(wrongMethod.reason == "MethodNotAllowed")
            let unknownPath = try await send("GET", path: "/1/apps/\(Self.bundle)/channel-list")
            #expect(unknownPath.status == 404)
            #expect(unknownPath.reason == "BadPath")

            // The limit is per bundle id.
            #expect(try await send("POST", body: Self.creation).status == 201)
            #expect(try await send("POST", body: Self.creation).reason == "CannotCreateChannelConfig")
            #expect(try await send("POST", path: "/1/apps/com.example.other/channels", body: Self.creation).status == 201)

            let deleted = try await send("DELETE", [("apns-channel-id", channelID)])
            #expect(deleted.status == 204)
            #expect(try await send("DELETE", [("apns-channel-id", channelID)]).reason == "ChannelNotRegistered")
            #expect(try await send("POST", body: Self.creation).status == 201, "room again after a deletion")
            #expect(!harness.simulator.channels.ids(bundleID: Self.bundle).contains(channelID))

            let requests = harness.simulator.channels.requests
            let first = try #require(requests.first)
            #expect(first.method == "POST")
            #expect(first.path == Self.channels)
            #expect(first.status == 403)
            #expect(first.reason == "MissingProviderToken")
            #expect(first.receivedAt == harness.clock.now)
            #expect(requests.count == 23)
            #expect(requests.filter { $0.status == 405 }.map(\.method) == ["PUT"])
            // The device port's statistics leave the management API out.
            #expect(harness.simulator.statistics.requestsTotal == 0)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func channelsPortCanBeSwitchedOff() async throws {
        try await SimulatorHarness.with(configure: { $0.channelsPort = nil }) { harness in
            #expect(harness.simulator.channelsPort == nil)
        }
    }

    // MARK: Broadcasts

    @Test(.timeLimit(.minutes(1)))
    func broadcastsAreValidatedAndRecorded() async throws {
        try await SimulatorHarness.with { harness in
            let simulator = harness.simulator
            let stored = simulator.channels.create(bundleID: Self.bundle, storagePolicy: 1)
            let unstored = simulator.channels.create(bundleID: Self.bundle, storagePolicy: 0)
            let deleted = simulator.channels.create(bundleID: Self.bundle, storagePolicy: 1)
            simulator.channels.delete(deleted)
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let path = "/4/broadcasts/apps/\(Self.bundle)"
            func send(_ changes: (inout [String: String]) -> Void = { _ in }, path: String = path, method: String = "POST",
                      body: String? = Self.update) async throws -> SimulatorRawClient.Outcome {
                var fields = ["authorization": "bearer \(harness.jwt)", "apns-channel-id": stored,
                              "apns-push-type": "liveactivity", "apns-expiration": "0", "apns-priority": "10"]
                changes(&fields)
                return try await client.request(method: method, path: path, headers: fields.sorted { $0.key < $1.key }
                    .map { ($0.key, $0.value) }, body: body)
            }

            let requestID = "5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
            let accepted = try await send { $0["apns-request-id"] = requestID; $0["apns-priority"] = "1" }
            #expect(accepted.status == 200)
            if case .response(_, let headers, let body) = accepted {
                #expect(headers["apns-request-id"] == requestID)
                #expect(UUID(uuidString: headers["apns-unique-id"] ?? "") != nil)
                #expect(headers["apns-id"] == nil)
                #expect(body.isEmpty)
            }
            #expect(try await send { $0["apns-expiration"] = "1900000000" }.status == 200, "policy 1 stores")
            #expect(try await send { $0["apns-channel-id"] = unstored }.status == 200)

            #expect(try await send { $0["apns-channel-id"] = nil }.reason == "MissingChannelId")
            #expect(try await send { $0["apns-channel-id"] = "bm90LWEtY2hhbm5lbA==" }.reason == "ChannelNotRegistered")
            #expect(try await send { $0["apns-channel-id"] = deleted }.reason == "ChannelNotRegistered")
            #expect(try await send { $0["apns-push-type"] = nil }.reason == "MissingPushType")
            #expect(try await send { $0["apns-push-type"] = "alert" }.reason == "InvalidPushType")
            #expect(try await send { $0["apns-expiration"] = nil }.reason == "BadExpirationDate")
            #expect(try await send { $0["apns-channel-id"] = unstored; $0["apns-expiration"] = "1900000000" }.reason
                == "BadExpirationDate")
            #expect(try await send { $0["apns-priority"] = nil }.reason == "BadPriority")
            #expect(try await send { $0["apns-priority"] = "7" }.reason == "BadPriority")
            #expect(try await send(body: nil).reason == "PayloadEmpty")
            #expect(try await send(body: "{not json").reason == "BadRequestPayload")
            #expect(try await send(body: Self.start).reason == "BadRequestPayload", "a channel never starts an activity")
            let tooLarge = try await send(body: "{\"aps\":{},\"pad\":\"" + String(repeating: "x", count: 5120) + "\"}")
            #expect(tooLarge.status == 413)
            #expect(tooLarge.reason == "PayloadTooLarge")
            #expect(try await send(path: path + ".push-type.liveactivity").reason == "TopicDisallowed")
            #expect(try await send(method: "GET").reason == "MethodNotAllowed")
            #expect(try await send(path: "/4/broadcasts/\(Self.bundle)").reason == "BadPath")
            #expect(try await send { $0["authorization"] = nil }.reason == "MissingProviderToken")

            let ledger = simulator.broadcastLedger
            #expect(ledger.map(\.channelID) == [stored, stored, unstored])
            #expect(ledger.map(\.priority) == [1, 10, 10])
            #expect(ledger.map(\.expiration) == [0, 1_900_000_000, 0])
            #expect(ledger.allSatisfy { $0.bundleID == Self.bundle && $0.payload == Array(Self.update.utf8) })
            #expect(simulator.ledger.acceptedCount == 0, "broadcasts stay out of the device ledger")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func broadcastFaultsCanBeARate() async throws {
        try await SimulatorHarness.with(configure: { $0.faults.broadcast.rate = 1; $0.faults.broadcast.status = 500 }) { harness in
            let channelID = harness.simulator.channels.create(bundleID: Self.bundle, storagePolicy: 0)
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let headers = [("authorization", "bearer \(harness.jwt)"), ("apns-channel-id", channelID),
                           ("apns-push-type", "liveactivity"), ("apns-expiration", "0"), ("apns-priority", "10")]
            let path = "/4/broadcasts/apps/\(Self.bundle)"
            #expect(try await client.request(path: path, headers: headers, body: Self.update).reason == "InternalServerError")
            harness.simulator.updateFaults { $0.broadcast.rate = 0 }
            #expect(try await client.request(path: path, headers: headers, body: Self.update).status == 200)
        }
    }
}
