/// Helpers for APNs device tokens, which pgpush stores and sends as hex strings.
public enum DeviceToken {
    /// The accepted length range in hex characters. 64 is today's 32-byte token; Apple has said tokens
    /// may grow, so up to 200 is accepted.
    public static let validLengths: ClosedRange<Int> = 64...200

    /// Whether `s` looks like a device token: 64–200 hexadecimal characters (either case), nothing else.
    public static func isValid(_ s: String) -> Bool {
        let utf8 = s.utf8
        guard validLengths.contains(utf8.count) else { return false }
        return utf8.allSatisfy(isHexDigit)
    }

    /// Whether `byte` is an ASCII hexadecimal digit, either case.
    public static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    /// The form used in logs and error messages: the first 8 characters and "…", so a whole token is never printed.
    public static func shortened(_ s: String) -> String {
        String(s.prefix(8)) + "…"
    }
}
