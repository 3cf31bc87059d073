import Foundation
import NIOCore
import NIOHPACK
import Testing

@testable import PGPushSimulator

/// The simulator's Live Activity rules as pure functions: no socket.
@Suite("APNs simulator: Live Activity rules")
struct LiveActivitySimulatorUnitTests {
    let validator = SimulatorRequestValidator(tokenHexLength: 64...200, allowedTopics: nil)
    let token = String(repeating: "ab", count: 32)
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":1}}}"#

    private func validate(_ extra: [(String, String)], body: String = Self.update,
                          certificateTopics: [String]? = nil) -> Result<ValidatedRequest, SimulatorRejection> {
        var headers = HPACKHeaders([(":method", "POST"), (":path", "/3/device/\(token)"), ("apns-push-type", "liveactivity")])
        for (name, value) in extra { headers.add(name: name, value: value) }
        return validator.validate(headers: headers, body: ByteBuffer(string: body), certificateTopics: certificateTopics)
    }

    private func reason(_ result: Result<ValidatedRequest, SimulatorRejection>) -> String? {
        if case .failure(let rejection) = result { return rejection.reason }
        return nil
    }

    @Test func liveActivityNeedsTheSuffixedTopicAndTokenAuth() throws {
        let topic = ("apns-topic", "com.example.app.push-type.liveactivity")
        let request = try validate([topic, ("apns-priority", "5")]).get()
        #expect(request.pushType == .liveactivity)
        #expect(request.priority == 5)
        #expect(reason(validate([("apns-topic", "com.example.app")])) == "DeviceTokenNotForTopic")
        #expect(reason(validate([topic], certificateTopics: [])) == "InvalidPushType")
        #expect(reason(validate([topic, ("apns-priority", "1")])) == "BadPriority")
        #expect(try validate([topic, ("apns-priority", "10")]).get().priority == 10)
        // Other push types keep their rules: priority 1 is fine for an alert.
        var alert = HPACKHeaders([(":method", "POST"), (":path", "/3/device/\(token)"), ("apns-topic", "com.example.app"),
                                  ("apns-push-type", "alert"), ("apns-priority", "1")])
        alert.add(name: "authorization", value: "bearer x")
        #expect((try? validator.validate(headers: alert, body: ByteBuffer(string: "{}"), certificateTopics: nil).get()) != nil)
    }

    @Test(arguments: [
        (#"{"aps":{"event":"update","content-state":{}}}"#, false),  // no timestamp
        (#"{"aps":{"timestamp":"1700000000","event":"update","content-state":{}}}"#, false),  // not an integer
        (#"{"aps":{"timestamp":1700000000.5,"event":"update","content-state":{}}}"#, false),
        (#"{"aps":{"timestamp":true,"event":"update","content-state":{}}}"#, false),
        (#"{"aps":{"timestamp":1700000000,"event":"pause","content-state":{}}}"#, false),
        (#"{"aps":{"timestamp":1700000000,"content-state":{}}}"#, false),
        (#"{"aps":{"timestamp":1700000000,"event":"update"}}"#, false),
        (#"{"aps":{"timestamp":1700000000,"event":"end","content-state":[]}}"#, false),
        (#"{"aps":{"timestamp":1700000000,"event":"end","content-state":{},"dismissal-date":1700003600}}"#, true),
        (#"{"aps":{"timestamp":1700000000,"event":"start","content-state":{}}}"#, false),
        (#"{"aps":{"timestamp":1700000000,"event":"start","alert":{"title":"Go"},"attributes-type":"MatchAttributes"}}"#, false),
        (#"{"aps":{"timestamp":1700000000,"event":"start","alert":{"title":"Go"},"attributes-type":"MatchAttributes","attributes":{"id":1},"content-state":{}}}"#, true),
        (#"{"aps":{"timestamp":1700000000,"event":"start","alert":"Go","attributes-type":"M","attributes":{}}}"#, true),
        (#"{"notaps":{}}"#, false),
    ])
    func liveActivityPayloads(payload: String, valid: Bool) {
        let rejection = LiveActivityPayloadRules.check(ByteBuffer(string: payload), endpoint: .device)
        #expect((rejection == nil) == valid, "\(payload)")
        if !valid { #expect(rejection?.reason == "BadRequestPayload") }
    }

    @Test func broadcastsNeverStartAnActivity() {
        let start = #"{"aps":{"timestamp":1,"event":"start","alert":"Go","attributes-type":"M","attributes":{}}}"#
        #expect(LiveActivityPayloadRules.check(ByteBuffer(string: start), endpoint: .broadcast) != nil)
        #expect(LiveActivityPayloadRules.check(ByteBuffer(string: Self.update), endpoint: .broadcast) == nil)
    }

    @Test func broadcastRoutesAndChecks() {
        #expect((try? BroadcastRequestValidator.route(method: "POST", path: "/4/broadcasts/apps/com.example.app").get()) == "com.example.app")
        #expect(BroadcastRequestValidator.route(method: "GET", path: "/4/broadcasts/apps/com.example.app").failureReason == "MethodNotAllowed")
        #expect(BroadcastRequestValidator.route(method: "POST", path: "/4/broadcasts/apps/").failureReason == "BadPath")
        #expect(BroadcastRequestValidator.route(method: "POST", path: "/4/broadcasts/apps/a/b").failureReason == "BadPath")

        func check(_ changes: (inout [String: String]) -> Void, body: String = Self.update, policy: Int? = 1) -> String? {
            var fields = ["apns-channel-id": "Y2hhbm5lbA==", "apns-push-type": "liveactivity", "apns-expiration": "0",
                          "apns-priority": "10"]
            changes(&fields)
            let headers = BroadcastHeaders(HPACKHeaders(fields.map { ($0.key, $0.value) }))
            return BroadcastRequestValidator.validate(
                headers, bundleID: "com.example.app", body: ByteBuffer(string: body), allowedTopics: nil,
                storagePolicy: { _ in policy }).failureReason
        }
        #expect(check { _ in } == nil)
        #expect(check { $0["apns-channel-id"] = nil } == "MissingChannelId")
        #expect(check { $0["apns-channel-id"] = "not base64!" } == "BadChannelId")
        #expect(check({ _ in }, policy: nil) == "ChannelNotRegistered")
        #expect(check { $0["apns-push-type"] = nil } == "MissingPushType")
        #expect(check { $0["apns-push-type"] = "alert" } == "InvalidPushType")
        #expect(check { $0["apns-expiration"] = nil } == "BadExpirationDate")
        #expect(check { $0["apns-expiration"] = "soon" } == "BadExpirationDate")
        #expect(check({ $0["apns-expiration"] = "1700000000" }, policy: 0) == "BadExpirationDate")
        #expect(check({ $0["apns-expiration"] = "1700000000" }, policy: 1) == nil)
        #expect(check { $0["apns-priority"] = nil } == "BadPriority")
        #expect(check { $0["apns-priority"] = "7" } == "BadPriority")
        #expect(check { $0["apns-priority"] = "1" } == nil)
        #expect(check({ _ in }, body: "") == "PayloadEmpty")
        #expect(check({ _ in }, body: "{not json") == "BadRequestPayload")
        #expect(check({ _ in }, body: "{\"aps\":{},\"x\":\"" + String(repeating: "x", count: 5120) + "\"}") == "PayloadTooLarge")
    }

    @Test func channelManagementRoutes() {
        func route(_ method: String, _ path: String) -> String {
            switch ChannelManagementAPI.route(method: method, path: path) {
            case .success(let routed): "\(routed.bundleID) \(routed.operation)"
            case .failure(let rejection): "\(rejection.status) \(rejection.reason)"
            }
        }
        #expect(route("POST", "/1/apps/com.example.app/channels") == "com.example.app create")
        #expect(route("GET", "/1/apps/com.example.app/channels") == "com.example.app read")
        #expect(route("DELETE", "/1/apps/com.example.app/channels") == "com.example.app delete")
        #expect(route("GET", "/1/apps/com.example.app/all-channels") == "com.example.app listAll")
        #expect(route("PUT", "/1/apps/com.example.app/channels") == "405 MethodNotAllowed")
        #expect(route("POST", "/1/apps/com.example.app/all-channels") == "405 MethodNotAllowed")
        #expect(route("GET", "/1/apps/com.example.app/channel") == "404 BadPath")
        #expect(route("GET", "/1/apps//channels") == "404 BadPath")
        #expect(route("GET", "/2/apps/com.example.app/channels") == "404 BadPath")
    }

    @Test func channelCreationBodies() {
        func policy(_ body: String) -> String {
            switch ChannelManagementAPI.creationPolicy(ByteBuffer(string: body)) {
            case .success(let policy): "\(policy)"
            case .failure(let rejection): rejection.reason
            }
        }
        #expect(policy(#"{"message-storage-policy":0,"push-type":"LiveActivity"}"#) == "0")
        #expect(policy(#"{"push-type":"LiveActivity","message-storage-policy":1}"#) == "1")
        #expect(policy("") == "PayloadEmpty")
        #expect(policy("{nope") == "BadRequestPayload")
        #expect(policy("[1]") == "BadRequestPayload")
        #expect(policy(#"{"message-storage-policy":1,"push-type":"LiveActivity","colour":"red"}"#) == "BadRequestParams")
        #expect(policy(#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#) == "BadRequestParams")
        #expect(policy(#"{"push-type":"LiveActivity"}"#) == "BadRequestParams")
        #expect(policy(#"{"message-storage-policy":1}"#) == "MissingPushType")
        #expect(policy(#"{"message-storage-policy":1,"push-type":"liveactivity"}"#) == "InvalidPushType")
    }

    @Test func channelsAreNeverReusedAndBelongToOneBundle() {
        let channels = SimulatorChannels()
        let first = channels.create(bundleID: "a", storagePolicy: 0)
        let second = channels.create(bundleID: "a", storagePolicy: 1)
        #expect(first != second)
        #expect(Data(base64Encoded: first)?.count == 16)
        #expect(channels.ids(bundleID: "a") == [first, second])
        #expect(channels.storagePolicy(of: second) == 1)
        #expect(channels.storagePolicy(of: first, bundleID: "b") == nil)
        #expect(!channels.delete(first, bundleID: "b"))
        channels.delete(first)
        #expect(channels.ids(bundleID: "a") == [second])
        #expect(channels.storagePolicy(of: first) == nil)
        #expect(channels.create(bundleID: "a", storagePolicy: 0, limit: 1) == nil)
        #expect(channels.create(bundleID: "b", storagePolicy: 0, limit: 1) != nil)
    }

    @Test func requestFaultsFailTheFirstThenASeededFraction() {
        var faults = SimulatorRequestFaults()
        #expect(faults.rejection(requestNumber: 1, seed: 1, salt: 0) == nil)
        faults.failFirst = 2
        faults.status = 429
        #expect(faults.rejection(requestNumber: 1, seed: 1, salt: 0) == SimulatorRejection(status: 429, reason: "TooManyRequests"))
        #expect(faults.rejection(requestNumber: 2, seed: 1, salt: 0) != nil)
        #expect(faults.rejection(requestNumber: 3, seed: 1, salt: 0) == nil)
        faults.failFirst = 0
        faults.rate = 0.25
        faults.status = 500
        let failed = (1...4000).filter { faults.rejection(requestNumber: $0, seed: 7, salt: 3) != nil }.count
        #expect((800...1200).contains(failed), "\(failed)")
        let again = (1...4000).filter { faults.rejection(requestNumber: $0, seed: 7, salt: 3) != nil }.count
        #expect(again == failed, "seeded")
        #expect(faults.reason == "InternalServerError")
        #expect(SimulatorRequestFaults().reason == "ServiceUnavailable")
    }

    @Test func ledgerEntriesWithoutTheNewFieldsStillDecode() throws {
        let old = #"{"token":"ab","apnsID":"x","topic":null,"payloadSHA256":"00","receivedAt":0}"#
        let entry = try JSONDecoder().decode(SimulatorLedgerEntry.self, from: Data(old.utf8))
        #expect(entry.pushType == nil)
        #expect(entry.priority == nil)
    }
}

extension Result where Failure == SimulatorRejection {
    var failureReason: String? {
        if case .failure(let rejection) = self { return rejection.reason }
        return nil
    }
}
