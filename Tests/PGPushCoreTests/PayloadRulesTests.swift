import Testing
import PGPushCore

@Suite struct PayloadRulesTests {
    private func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

    private func rejects(_ payload: [UInt8], _ pushType: PushType = .alert) -> PGPushError? {
        do {
            try PayloadRules.validate(payload: payload, pushType: pushType)
            return nil
        } catch {
            return error
        }
    }

    @Test func acceptsValidPayloads() throws {
        try PayloadRules.validate(payload: bytes(#"{"aps":{"alert":"hi"}}"#), pushType: .alert)
        try PayloadRules.validate(payload: bytes(#"{"aps":{"content-available":1},"custom":[1,2]}"#), pushType: .background)
    }

    @Test func rejectsMalformed() {
        for text in ["", "not json", "[1,2]", "\"aps\"", #"{"alert":"hi"}"#, #"{"aps":"hi"}"#, #"{"aps":[1]}"#, #"{"aps":{}"#] {
            let error = rejects(bytes(text))
            #expect(error?.code == .invalidInput, "\(text)")
        }
    }

    @Test func sizeLimitDependsOnPushType() throws {
        func payload(totalBytes: Int) -> [UInt8] {
            let prefix = #"{"aps":{"alert":""#
            let suffix = #""}}"#
            return bytes(prefix + String(repeating: "x", count: totalBytes - prefix.utf8.count - suffix.utf8.count) + suffix)
        }
        try PayloadRules.validate(payload: payload(totalBytes: 4096), pushType: .alert)
        #expect(rejects(payload(totalBytes: 4097), .alert)?.code == .invalidInput)
        try PayloadRules.validate(payload: payload(totalBytes: 5120), pushType: .voip)
        #expect(rejects(payload(totalBytes: 5121), .voip)?.code == .invalidInput)
    }
}
