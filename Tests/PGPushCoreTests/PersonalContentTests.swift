import Foundation
import PGPushCore
import Testing

@Suite struct LocaleVariantsTests {
    let variants = LocaleVariants(base: "job", variants: ["fr": "fr", "fr-ca": "fr-ca", "de": "de", "zh-hant": "zh-hant"])

    @Test func aDeviceGetsItsOwnLocaleThenItsLanguageThenTheJobsMessage() {
        #expect(variants.best(for: "fr-ca") == "fr-ca")
        #expect(variants.best(for: "fr-be") == "fr")
        #expect(variants.best(for: "fr") == "fr")
        #expect(variants.best(for: "zh-hant-tw") == "zh-hant")
        #expect(variants.best(for: "zh-hans-cn") == "job")
        #expect(variants.best(for: "en-us") == "job")
        #expect(variants.best(for: nil) == "job")
        #expect(variants.best(for: "") == "job")
    }

    @Test func aLocaleIsNotMatchedByAPrefixThatIsNotASubtag() {
        // "fra" is not "fr" with a subtag: only whole subtags are dropped.
        #expect(variants.best(for: "fra") == "job")
        #expect(variants.best(for: "de-ch-1996") == "de")
    }

    @Test func pairsFromTheStoreReadTheJobsMessageAndEachVariant() throws {
        let read = try #require(LocaleVariants<[UInt8]>(pairs: ["", "base", "fr", "bonjour", "fr-ca", "allo"]))
        #expect(read.base == Array("base".utf8))
        #expect(read.best(for: "fr-ca") == Array("allo".utf8))
        #expect(read.best(for: "fr-fr") == Array("bonjour".utf8))
        // Without the job's own message there is nothing to send a device without a match.
        #expect(LocaleVariants<[UInt8]>(pairs: ["fr", "bonjour"]) == nil)
    }
}

@Suite struct BadgeSlotTests {
    let apns = Array(#"{"x": "1", "aps": {"alert": "Hi", "badge": -2147483649, "sound": "default"}}"#.utf8)

    @Test func theCounterIsWrittenWhereTheStoreMarkedIt() throws {
        let slot = try #require(BadgeSlot(in: apns))
        let written = slot.write(3, into: apns)
        #expect(String(decoding: written, as: UTF8.self) == #"{"x": "1", "aps": {"alert": "Hi", "badge": 3, "sound": "default"}}"#)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(written)) as? [String: Any])
        #expect((object["aps"] as? [String: Any])?["badge"] as? Int == 3)
        #expect(String(decoding: slot.write(2_147_483_647, into: apns), as: UTF8.self).contains(#""badge": 2147483647,"#))
        for badge in [0, 9, 10, 99, 100, 1_234_567] {
            #expect(slot.write(badge, into: apns) == Array(#"{"x": "1", "aps": {"alert": "Hi", "badge": \#(badge), "sound": "default"}}"#.utf8))
        }
    }

    @Test func aBodyThatDiffersBeforeTheSlotUsesTheSameSlot() throws {
        // An FCM body: the token comes first, the marked message after it.
        let message = Array(#"{"android": {"notification": {"notification_count": -2147483649}}, "notification": {"title": "T"}}"#.utf8)
        let builder = try FCMRequestBodyBuilder(message: message)
        let slot = try #require(BadgeSlot(in: builder.body(forToken: "")))
        for token in ["a", "fcm-token-of-some-length:abc", String(repeating: "z", count: 300)] {
            let body = slot.write(41, into: builder.body(forToken: token))
            let root = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
            let sent = try #require(root["message"] as? [String: Any])
            #expect(sent["token"] as? String == token)
            let android = try #require(sent["android"] as? [String: Any])
            #expect((android["notification"] as? [String: Any])?["notification_count"] as? Int == 41)
        }
    }

    @Test func aBodyWithoutTheMarkHasNoSlotAndTheSentinelInsideAStringIsNotOne() {
        #expect(BadgeSlot(in: Array(#"{"aps": {"alert": "Hi", "badge": 2}}"#.utf8)) == nil)
        #expect(BadgeSlot(in: Array(#"{"aps": {"alert": "x-2147483649y"}}"#.utf8)) == nil)
        #expect(BadgeSlot(in: []) == nil)
    }

    @Test func aBodyOfAnotherShapeIsLeftAsItIs() throws {
        let slot = try #require(BadgeSlot(in: apns))
        let other = Array(#"{"aps": {"alert": "short"}}"#.utf8)
        #expect(slot.write(1, into: other) == other)
        #expect(slot.write(1, into: []) == [])
    }

    @Test func aNegativeCounterIsSentAsZero() throws {
        let slot = try #require(BadgeSlot(in: apns))
        #expect(String(decoding: slot.write(-5, into: apns), as: UTF8.self).contains(#""badge": 0,"#))
    }
}
