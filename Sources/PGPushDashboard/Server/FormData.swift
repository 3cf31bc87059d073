import Foundation

/// `application/x-www-form-urlencoded` pairs: a page's query string, or an action's form body.
public struct FormData: Sendable, Hashable {
    public private(set) var pairs: [(String, String)] = []

    public init(_ encoded: String?) {
        guard let encoded, !encoded.isEmpty else { return }
        for part in encoded.split(separator: "&", omittingEmptySubsequences: true) {
            let kv = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = Self.decode(kv[0])
            let value = kv.count > 1 ? Self.decode(kv[1]) : ""
            pairs.append((key, value))
        }
    }

    public init(pairs: [(String, String)]) {
        self.pairs = pairs
    }

    /// The first value of `key`, nil when absent or blank (an empty form field means "no filter").
    public subscript(key: String) -> String? {
        guard let value = pairs.first(where: { $0.0 == key })?.1 else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        return trimmed.isEmpty ? nil : trimmed
    }

    /// Every value of `key` (a repeatable parameter such as `label`), trimmed, blanks left out.
    public func all(_ key: String) -> [String] {
        pairs.compactMap { k, value in
            guard k == key else { return nil }
            let trimmed = value.trimmingCharacters(in: .whitespaces)
            return trimmed.isEmpty ? nil : trimmed
        }
    }

    /// These pairs with one more `key=value` (unless that very pair is there already) and `removing` taken out,
    /// as a query string with a leading `?`.
    public func adding(_ key: String, _ value: String, removing: [String] = []) -> String {
        var kept = pairs.filter { !removing.contains($0.0) && !$0.1.isEmpty }
        if !kept.contains(where: { $0.0 == key && $0.1.trimmingCharacters(in: .whitespaces) == value }) {
            kept.append((key, value))
        }
        return Self.encode(kept)
    }

    /// These pairs with `key` set to `value` (removed for nil), as a query string with a leading `?`
    /// (empty when no pair is left).
    public func setting(_ key: String, _ value: String?) -> String {
        var kept = pairs.filter { $0.0 != key && !$0.1.isEmpty }
        if let value { kept.append((key, value)) }
        return Self.encode(kept)
    }

    public static func encode(_ pairs: [(String, String)]) -> String {
        guard !pairs.isEmpty else { return "" }
        return "?" + pairs.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
    }

    /// Percent-encodes everything but unreserved characters (RFC 3986), so the result is safe in a path
    /// segment, a query and an attribute.
    public static func percentEncode(_ s: String) -> String {
        var out = ""
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(UnicodeScalar(byte))
            default:
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }

    /// `+` is a space, `%XX` a byte; malformed escapes stay as they are; invalid UTF-8 is repaired.
    static func decode(_ s: Substring) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(s.utf8.count)
        var iterator = Array(s.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%"), iterator.count >= 2,
                let value = UInt8(String(decoding: iterator.prefix(2), as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                iterator = iterator.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    public static func == (lhs: FormData, rhs: FormData) -> Bool {
        lhs.pairs.map { [$0.0, $0.1] } == rhs.pairs.map { [$0.0, $0.1] }
    }

    public func hash(into hasher: inout Hasher) {
        for (k, v) in pairs {
            hasher.combine(k)
            hasher.combine(v)
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
