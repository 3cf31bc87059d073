import Foundation
@testable import PGPushClient
import Testing

/// The builders' JSON shapes: what each typed field becomes in the jsonb the SQL API takes (fast tier).
struct PayloadBuilderTests {
    /// `value` as the client encodes it, read back as a JSON value to compare with a literal.
    static func json(_ value: some Encodable) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(ClientJSON.text(value).utf8))
    }

    @Test func anAPNsAlertWithEveryAPSField() throws {
        let payload = APNsPayload(
            alert: .init(title: "Goal!", subtitle: "Final minutes", body: "2-1 in the 89th"), badge: 3, sound: .default,
            threadID: "match-77", category: "SCORE", contentAvailable: true, mutableContent: true,
            interruptionLevel: .timeSensitive, relevanceScore: 0.5, custom: ["match": "77", "minute": 89])
        #expect(try Self.json(payload) == [
            "aps": [
                "alert": ["title": "Goal!", "subtitle": "Final minutes", "body": "2-1 in the 89th"],
                "badge": 3, "sound": "default", "thread-id": "match-77", "category": "SCORE",
                "content-available": 1, "mutable-content": 1, "interruption-level": "time-sensitive",
                "relevance-score": 0.5,
            ],
            "match": "77", "minute": 89,
        ])
    }

    @Test func unsetFieldsAreLeftOut() throws {
        #expect(try Self.json(APNsPayload()) == ["aps": [:]])
        #expect(try Self.json(APNsPayload(alert: "Your order shipped")) == ["aps": ["alert": "Your order shipped"]])
        #expect(try Self.json(APNsPayload(alert: .init(body: "only the body"))) == ["aps": ["alert": ["body": "only the body"]]])
    }

    @Test func aCustomAPSKeyNeverReplacesTheTypedOne() throws {
        let payload = APNsPayload(alert: "typed", custom: ["aps": ["alert": "custom"], "x": true])
        #expect(try Self.json(payload) == ["aps": ["alert": "typed"], "x": true])
    }

    @Test func localizedAlertKeysAndACriticalSound() throws {
        let payload = APNsPayload(
            alert: .init(titleLocKey: "GOAL_TITLE", titleLocArgs: ["77"], locKey: "GOAL_BODY", locArgs: ["2", "1"]),
            sound: .critical(name: "siren.caf", volume: 1))
        #expect(try Self.json(payload) == [
            "aps": [
                "alert": ["title-loc-key": "GOAL_TITLE", "title-loc-args": ["77"], "loc-key": "GOAL_BODY", "loc-args": ["2", "1"]],
                "sound": ["critical": 1, "name": "siren.caf", "volume": 1],
            ],
        ])
    }

    @Test func anFCMMessage() throws {
        let message = FCMMessage(
            notification: .init(title: "Goal!", body: "2-1", image: "https://example.com/goal.png"),
            data: ["match": "77"],
            android: .init(
                priority: .high, ttl: .seconds(600), collapseKey: "match-77",
                notification: .init(sound: "default", tag: "match-77", clickAction: "OPEN_MATCH", channelID: "scores",
                                     notificationCount: 2)))
        #expect(try Self.json(message) == [
            "notification": ["title": "Goal!", "body": "2-1", "image": "https://example.com/goal.png"],
            "data": ["match": "77"],
            "android": [
                "priority": "HIGH", "ttl": "600s", "collapse_key": "match-77",
                "notification": ["sound": "default", "tag": "match-77", "click_action": "OPEN_MATCH", "channel_id": "scores",
                                 "notification_count": 2],
            ],
        ])
        #expect(try Self.json(FCMMessage(data: ["refresh": "scores"], android: .init(priority: .normal))) == [
            "data": ["refresh": "scores"], "android": ["priority": "NORMAL"],
        ])
    }

    @Test func aTTLIsAProtobufDuration() {
        #expect(FCMMessage.Android.durationText(.seconds(2_419_200)) == "2419200s")
        #expect(FCMMessage.Android.durationText(.milliseconds(1500)) == "1.5s")
        #expect(FCMMessage.Android.durationText(.nanoseconds(1)) == "0.000000001s")
    }

    @Test func liveActivityStartUpdateAndEnd() throws {
        let at = Date(timeIntervalSince1970: 1_767_225_600.75)
        let start = LiveActivityPayload.start(
            attributesType: "MatchAttributes", attributes: ["match": "77"], contentState: ["score": "0-0"],
            alert: .init(title: "Kick-off", body: "The match has started", sound: "whistle.caf"), timestamp: at,
            staleDate: at.addingTimeInterval(3600), inputPushToken: true)
        #expect(try Self.json(start) == [
            "aps": [
                "timestamp": 1_767_225_600, "event": "start", "attributes-type": "MatchAttributes",
                "attributes": ["match": "77"], "content-state": ["score": "0-0"],
                "alert": ["title": "Kick-off", "body": "The match has started", "sound": "whistle.caf"],
                "stale-date": 1_767_229_200, "input-push-token": 1,
            ],
        ])
        #expect(try Self.json(LiveActivityPayload.update(contentState: ["score": "2-1"], timestamp: at)) == [
            "aps": ["timestamp": 1_767_225_600, "event": "update", "content-state": ["score": "2-1"]],
        ])
        let end = LiveActivityPayload.end(contentState: ["score": "3-1"], timestamp: at, dismissalDate: at)
        #expect(try Self.json(end) == [
            "aps": ["timestamp": 1_767_225_600, "event": "end", "content-state": ["score": "3-1"], "dismissal-date": 1_767_225_600],
        ])
    }

    @Test func contentStateFromTheAppsOwnCodableType() throws {
        struct ContentState: Codable { var score: String; var minute: Int }
        let state = try JSONValue(encoding: ContentState(score: "2-1", minute: 89))
        #expect(state == ["score": "2-1", "minute": 89])
        #expect(try state.decode(ContentState.self).minute == 89)
    }

    @Test func localeVariantsArePartialPayloads() throws {
        let variants: [String: LocalizedVariant] = [
            "fr": LocalizedVariant(APNsPayload(alert: .init(title: "But !", body: "2-1 à la 89e"))),
            "de": LocalizedVariant(APNsPayload(alert: .init(title: "Tor!")), fcm: FCMMessage(notification: .init(title: "Tor!"))),
            "es": LocalizedVariant(fcm: FCMMessage(notification: .init(title: "¡Gol!"))),
            "it": LocalizedVariant(patch: ["aps": ["sound": nil]]),
            "pt": LocalizedVariant(liveActivityAlert: .init(title: "Golo!"), contentState: ["score": "2-1"]),
        ]
        #expect(try Self.json(variants) == [
            "fr": ["aps": ["alert": ["title": "But !", "body": "2-1 à la 89e"]]],
            "de": ["aps": ["alert": ["title": "Tor!"]], "fcm": ["notification": ["title": "Tor!"]]],
            "es": ["fcm": ["notification": ["title": "¡Gol!"]]],
            "it": ["aps": ["sound": nil]],
            "pt": ["aps": ["alert": ["title": "Golo!"], "content-state": ["score": "2-1"]]],
        ])
        #expect(throws: EncodingError.self) {
            try ClientJSON.text(LocalizedVariant(patch: "not an object", fcm: FCMMessage(data: ["a": "b"])))
        }
    }

    @Test func theRequestPicksItsPushTypeFromALiveActivityPayload() {
        let update = EnqueueRequest(app: "news", payload: .liveActivity(.update(contentState: ["score": "1-0"])),
                                    audience: .activityIDs(["match-77"]))
        #expect(update.effectivePushType == .liveActivity)
        #expect(EnqueueRequest(app: "news", payload: .apns(APNsPayload(contentAvailable: true))).effectivePushType == nil)
        #expect(EnqueueRequest(app: "news", payload: .apns(APNsPayload()), pushType: .background).effectivePushType == .background)
    }

    @Test func errorCodesFollowTheSQLState() {
        #expect(PGPushClientError.code(sqlState: "23514") == .invalidInput)
        #expect(PGPushClientError.code(sqlState: "23502") == .invalidInput)
        #expect(PGPushClientError.code(sqlState: "22P02") == .invalidInput)
        #expect(PGPushClientError.code(sqlState: "23503") == .unknown)
        #expect(PGPushClientError.code(sqlState: "P0002") == .unknown)
        #expect(PGPushClientError.code(sqlState: "42501") == .permissionDenied)
        #expect(PGPushClientError.code(sqlState: "40001") == .database)
    }
}
