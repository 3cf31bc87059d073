import Foundation

/// base64url without padding (RFC 7515 §2), as JWTs use it.
enum FCMBase64URL {
    static func encode(_ bytes: some DataProtocol) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-")
        text = text.replacingOccurrences(of: "/", with: "_")
        text = text.replacingOccurrences(of: "=", with: "")
        return text
    }

    /// Strict: only the base64url alphabet, no padding. A lenient decoder would let two spellings of one
    /// signature verify, and the verifier is meant to refuse whatever Google would refuse.
    static func decode(_ text: Substring) -> Data? {
        guard text.utf8.count % 4 != 1 else { return nil }
        var base64 = ""
        base64.reserveCapacity(text.utf8.count + 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"):
                base64.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "-"): base64 += "+"
            case UInt8(ascii: "_"): base64 += "/"
            default: return nil
            }
        }
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
