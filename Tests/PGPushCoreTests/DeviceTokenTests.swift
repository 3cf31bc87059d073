import Testing
import PGPushCore

@Suite struct DeviceTokenTests {
    @Test func validity() {
        #expect(DeviceToken.isValid(String(repeating: "a", count: 64)))
        #expect(DeviceToken.isValid(String(repeating: "0F", count: 32)))
        #expect(DeviceToken.isValid(String(repeating: "9", count: 200)))
        #expect(!DeviceToken.isValid(String(repeating: "a", count: 63)))
        #expect(!DeviceToken.isValid(String(repeating: "a", count: 201)))
        #expect(!DeviceToken.isValid(String(repeating: "a", count: 63) + "g"))
        #expect(!DeviceToken.isValid(String(repeating: "a", count: 63) + " "))
        #expect(!DeviceToken.isValid(String(repeating: "a", count: 62) + "é"))
        #expect(!DeviceToken.isValid(""))
    }

    @Test func shortening() {
        let token = "0123456789abcdef" + String(repeating: "0", count: 48)
        #expect(DeviceToken.shortened(token) == "01234567…")
        #expect(DeviceToken.shortened("abc") == "abc…")
    }
}
