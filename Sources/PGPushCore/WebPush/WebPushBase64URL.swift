/// base64url (RFC 4648 §5), as Web Push writes keys, secrets, topics and JWT parts.
///
/// Hand-written over bytes, with no `Data` or `String` rewriting, because the worker decodes a subscription's
/// `p256dh` and `auth` for every message it sends.
public enum WebPushBase64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The 6-bit value of each base64url character, 0xFF for every other byte.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, character) in alphabet.enumerated() {
            table[Int(character)] = UInt8(index)
        }
        return table
    }()

    /// Whether `byte` is in the base64url alphabet (`A–Z a–z 0–9 - _`; padding `=` is not).
    @inline(__always)
    public static func isAlphabet(_ byte: UInt8) -> Bool {
        values[Int(byte)] != 0xFF
    }

    /// Encodes without padding.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.underestimatedCount * 4 / 3 + 3)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in bytes {
            accumulator = (accumulator << 8) | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                output.append(alphabet[Int((accumulator >> UInt32(bits)) & 0x3F)])
            }
        }
        if bits > 0 {
            output.append(alphabet[Int((accumulator << UInt32(6 - bits)) & 0x3F)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes base64url with or without padding; `nil` for any character outside the alphabet, a wrong amount
    /// of padding, or a length no encoding produces. The standard alphabet's `+` and `/` are refused.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var utf8 = Substring(text).utf8[...]
        // Padding, if any, must be exactly what makes the length a multiple of 4.
        if utf8.last == UInt8(ascii: "=") {
            guard utf8.count % 4 == 0 else { return nil }
            utf8 = utf8.dropLast()
            if utf8.last == UInt8(ascii: "=") { utf8 = utf8.dropLast() }
            guard utf8.count % 4 != 0, utf8.count % 4 != 1 else { return nil }
        }
        guard utf8.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in utf8 {
            let value = values[Int(byte)]
            guard value != 0xFF else { return nil }
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        return output
    }
}
