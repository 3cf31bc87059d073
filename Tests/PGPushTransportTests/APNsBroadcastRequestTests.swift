import Foundation
import NIOHPACK
import PGPushCore
import PGPushTransport
import Testing

/// The header blocks and bodies of the Live Activity broadcast requests, and the channel list's parser.
@Suite("APNs broadcast and channel requests")
struct APNsBroadcastRequestTests {
    let requestID = UUID(uuidString: "1F2E3D4C-5B6A-4978-8695-A4B3C2D1E0F9")!

    /// Name and value pairs in order, as the encoder would send them.
    private func pairs(_ headers: HPACKHeaders) -> [String] {
        headers.map { "\($0.name): \($0.value)" }
    }

    @Test func broadcastHeadersNameTheChannelAndNoDevice() {
        let payload = Array(#"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#.utf8)
        let request = APNsBroadcastRequest(
            bundleID: "com.example.app", channelID: "dHN0LXNyY2gtY2hubA==", priority: .powerAware, expiration: 0,
            requestID: requestID, payload: payload)
        let headers = request.headers(authority: "api.push.apple.com", authorization: "bearer jwt")
        #expect(pairs(headers) == [
            ":method: POST",
            ":scheme: https",
            ":path: /4/broadcasts/apps/com.example.app",
            ":authority: api.push.apple.com",
            "authorization: bearer jwt",
            "apns-channel-id: dHN0LXNyY2gtY2hubA==",
            "apns-push-type: liveactivity",
            "apns-expiration: 0",
            "apns-priority: 5",
            "apns-request-id: 1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9",
            "content-length: \(payload.count)",
        ])
        #expect(request.body == payload)
        #expect(!APNsBroadcastRequest.keepsResponseBody)
        // Certificate auth: no authorization header at all.
        #expect(request.headers(authority: "a", authorization: nil).first(name: "authorization") == nil)
    }

    @Test func perRequestValuesAreNotIndexed() {
        let request = APNsBroadcastRequest(
            bundleID: "com.example.app", channelID: "abc=", priority: .immediate, expiration: 1_700_000_000,
            requestID: requestID, payload: [])
        let headers = request.headers(authority: "a", authorization: nil)
        let indexing = Dictionary(headers.map { ($0.name, $0.indexable) }, uniquingKeysWith: { first, _ in first })
        #expect(indexing["apns-channel-id"] == .nonIndexable)
        #expect(indexing["apns-request-id"] == .nonIndexable)
        #expect(headers.first(name: "apns-expiration") == "1700000000")
        #expect(headers.first(name: "apns-priority") == "10")
        #expect(headers.first(name: "apns-topic") == nil)
    }

    @Test func channelCreationPostsItsPolicy() {
        let request = APNsChannelRequest(bundleID: "com.example.app", operation: .create(storagePolicy: 1), requestID: requestID)
        let headers = request.headers(authority: "api-manage-broadcast.sandbox.push.apple.com", authorization: "bearer jwt")
        let body = #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#
        #expect(pairs(headers) == [
            ":method: POST",
            ":scheme: https",
            ":path: /1/apps/com.example.app/channels",
            ":authority: api-manage-broadcast.sandbox.push.apple.com",
            "authorization: bearer jwt",
            "apns-request-id: 1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9",
            "content-type: application/json",
            "content-length: \(body.utf8.count)",
        ])
        #expect(String(decoding: request.body, as: UTF8.self) == body)
        #expect(APNsChannelRequest.keepsResponseBody)
    }

    @Test func readAndDeleteCarryTheIdInAHeaderAndHaveNoBody() {
        for (operation, method) in [(APNsChannelRequest.Operation.read(channelID: "Y2hhbm5lbA=="), "GET"),
                                    (.delete(channelID: "Y2hhbm5lbA=="), "DELETE")] {
            let request = APNsChannelRequest(bundleID: "com.example.app", operation: operation, requestID: requestID)
            let headers = request.headers(authority: "a", authorization: nil)
            #expect(pairs(headers) == [
                ":method: \(method)",
                ":scheme: https",
                ":path: /1/apps/com.example.app/channels",
                ":authority: a",
                "apns-channel-id: Y2hhbm5lbA==",
                "apns-request-id: 1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9",
            ])
            #expect(request.body.isEmpty)
        }
    }

    @Test func listAllHasItsOwnPath() {
        let request = APNsChannelRequest(bundleID: "com.example.app", operation: .listAll, requestID: requestID)
        let headers = request.headers(authority: "a", authorization: "bearer jwt")
        #expect(headers.first(name: ":method") == "GET")
        #expect(headers.first(name: ":path") == "/1/apps/com.example.app/all-channels")
        #expect(headers.first(name: "apns-channel-id") == nil)
        #expect(headers.first(name: "content-length") == nil)
        #expect(request.body.isEmpty)
    }

    @Test func channelListParsesOnlyItsShape() {
        #expect(APNsChannelList.parse(Array(#"{"channels":["a==","b=="]}"#.utf8)) == ["a==", "b=="])
        #expect(APNsChannelList.parse(Array(#"{"channels":[]}"#.utf8)) == [])
        #expect(APNsChannelList.parse(Array(#" {"channels":["a"],"other":1} "#.utf8)) == ["a"])
        #expect(APNsChannelList.parse([]) == nil)
        #expect(APNsChannelList.parse(Array(#"{"channels":["a",1]}"#.utf8)) == nil)
        #expect(APNsChannelList.parse(Array(#"{"reason":"BadPath"}"#.utf8)) == nil)
        #expect(APNsChannelList.parse(Array(#"["a"]"#.utf8)) == nil)
        #expect(APNsChannelList.parse(Array(#"{"channels":["a","#.utf8)) == nil)
    }
}
