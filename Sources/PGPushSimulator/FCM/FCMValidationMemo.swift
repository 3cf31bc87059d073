import Foundation
import NIOCore

/// Remembers the last `messages:send` body that passed validation on a connection, as the bytes around its
/// token. A sender sends one job's message to many tokens, so most bodies differ from the last one only in the
/// token; such a body gets the same verdict without being parsed again. Parsing every body cost the simulator
/// more than everything else it does per request, and on one machine that cost is taken from the sender.
///
/// The token is found as the only `"token":"` in the body. A body with none or several, or whose token is not
/// well formed, is always parsed in full, as is any body whose other bytes differ from the remembered ones:
/// per-device content (its own `notification_count`, a locale's text) makes a different body, judged afresh.
/// That is sound because the verdict depends on the token only through its own checks (well formed, which
/// ``tokenSpan(in:)`` repeats) and the size limit (which leaves the token out); ``remember(_:span:validated:)``
/// checks that the bytes found are the target the parser reads.
/// Not thread-safe: one per connection, used on its event loop.
struct FCMValidationMemo {
    private var prefix: [UInt8] = []
    private var suffix: [UInt8] = []
    private var validateOnly = false
    private var hasEntry = false

    static let tokenKey = Array(#""token":""#.utf8)

    mutating func validate(_ body: ByteBuffer, keepMessage: Bool) -> Result<FCMValidatedSend, FCMSimulatorError> {
        let span = body.withUnsafeReadableBytes { Self.tokenSpan(in: $0) }
        if let span, hasEntry, matches(body, span: span) {
            let bytes = body.readableBytesView
            let start = bytes.startIndex
            let token = String(decoding: bytes[(start + span.lowerBound)..<(start + span.upperBound)], as: UTF8.self)
            let message = keepMessage ? String(decoding: bytes, as: UTF8.self) : ""
            return .success(FCMValidatedSend(token: token, validateOnly: validateOnly, messageJSON: message))
        }
        let result = FCMMessageValidator.validate(Data(body.readableBytesView), keepMessage: keepMessage)
        guard case .success(let validated) = result, let span else { return result }
        remember(body, span: span, validated: validated)
        return result
    }

    /// Keeps the bytes around `span` only when `span` is the target the parser read: a body with another token
    /// there must parse to that other token, or a look-alike (a `data` key named `token`, say) was found.
    private mutating func remember(_ body: ByteBuffer, span: Range<Int>, validated: FCMValidatedSend) {
        let (before, value, after) = body.withUnsafeReadableBytes { raw in
            (Array(raw[..<span.lowerBound]), Array(raw[span]), Array(raw[span.upperBound...]))
        }
        guard validated.token.utf8.elementsEqual(value) else { return }
        let probe = value.map { $0 == UInt8(ascii: "z") ? UInt8(ascii: "y") : UInt8(ascii: "z") }
        guard case .success(let probed) = FCMMessageValidator.validate(Data(before + probe + after), keepMessage: false),
              probed.token.utf8.elementsEqual(probe)
        else { return }
        prefix = before
        suffix = after
        validateOnly = validated.validateOnly
        hasEntry = true
    }

    private func matches(_ body: ByteBuffer, span: Range<Int>) -> Bool {
        guard span.lowerBound == prefix.count, body.readableBytes - span.upperBound == suffix.count else { return false }
        return body.withUnsafeReadableBytes { raw in
            raw[..<span.lowerBound].elementsEqual(prefix) && raw[span.upperBound...].elementsEqual(suffix)
        }
    }

    /// The byte range of the token's value: after the only `"token":"`, up to the next quote, well formed.
    static func tokenSpan(in raw: UnsafeRawBufferPointer) -> Range<Int>? {
        var found: Int?
        var index = 0
        let key = tokenKey
        let last = raw.count - key.count
        while index <= last {
            if raw[index] == key[0], raw[(index + 1)..<(index + key.count)].elementsEqual(key[1...]) {
                guard found == nil else { return nil }
                found = index + key.count
                index += key.count
            } else {
                index += 1
            }
        }
        guard let start = found, let end = raw[start...].firstIndex(of: UInt8(ascii: "\"")), end > start,
              end - start <= FCMMessageValidator.maximumTokenLength
        else { return nil }
        guard raw[start..<end].allSatisfy(FCMMessageValidator.isTokenByte) else { return nil }
        return start..<end
    }
}
