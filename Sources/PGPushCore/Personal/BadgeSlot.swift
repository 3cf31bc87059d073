/// Where a device's badge counter goes in a message body. The store marks the place with a number no counter
/// reaches (`push.badge_sentinel()`, ``sentinel``); the worker writes each device's counter there, without
/// parsing or re-encoding the JSON. The slot is found once per message; its distance from the end of the body
/// is fixed, so a body that differs only before it (an FCM body, whose token comes first) uses the same slot.
public struct BadgeSlot: Sendable, Hashable {
    /// The number marking the place: one below Int32's minimum, so no counter equals it, and as wide as the
    /// widest counter, so a size measured with it holds for every device.
    public static let sentinel: [UInt8] = Array("-2147483649".utf8)

    /// The bytes after the sentinel, to the end of the body.
    public let tailLength: Int

    /// The slot in `body`, or nil when the body has no marked place. The last mark counts: an FCM body's is in
    /// the job's message, after the token.
    public init?(in body: [UInt8]) {
        let mark = Self.sentinel
        guard body.count >= mark.count else { return nil }
        var start = body.count - mark.count
        while start >= 0 {
            if body[start] == mark[0], body[start..<(start + mark.count)].elementsEqual(mark),
               Self.isNumberBoundary(body, before: start), Self.isNumberBoundary(body, after: start + mark.count) {
                tailLength = body.count - start - mark.count
                return
            }
            start -= 1
        }
        return nil
    }

    /// `body` with `badge` written in the slot. A body whose mark is not where the slot says (a message of
    /// another shape) is returned unchanged.
    public func write(_ badge: Int, into body: [UInt8]) -> [UInt8] {
        let mark = Self.sentinel
        let start = body.count - tailLength - mark.count
        guard start >= 0, body[start..<(start + mark.count)].elementsEqual(mark) else { return body }
        // The digits are written in place: this runs once per device of a broadcast.
        var value = max(0, badge)
        var digitCount = 1
        var rest = value / 10
        while rest > 0 { digitCount += 1; rest /= 10 }
        let tail = start + mark.count
        let tailCount = body.count - tail
        return [UInt8](unsafeUninitializedCapacity: start + digitCount + tailCount) { buffer, count in
            body.withUnsafeBufferPointer { source in
                guard let out = buffer.baseAddress, let from = source.baseAddress else { count = 0; return }
                out.initialize(from: from, count: start)
                for place in stride(from: start + digitCount - 1, through: start, by: -1) {
                    out[place] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
                (out + start + digitCount).initialize(from: from + tail, count: tailCount)
                count = start + digitCount + tailCount
            }
        }
    }

    private static func isNumberBoundary(_ body: [UInt8], before index: Int) -> Bool {
        index == 0 || body[index - 1] == UInt8(ascii: " ") || body[index - 1] == UInt8(ascii: ":")
    }

    private static func isNumberBoundary(_ body: [UInt8], after index: Int) -> Bool {
        guard index < body.count else { return true }
        let byte = body[index]
        return byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]") || byte == UInt8(ascii: " ")
    }
}
