import struct Foundation.UUID
import typealias Foundation.uuid_t

/// The `apns-id` text form, encoded and decoded without Foundation's formatter: on Linux that goes through
/// `sprintf`/`sscanf`, and both ends of the transport handle one id per request.
extension UUID {
    /// A nibble's lowercase hex digit.
    @inline(__always)
    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
    }

    /// The canonical lowercase 8-4-4-4-12 form, as APNs echoes it.
    public var apnsIDString: String {
        String(unsafeUninitializedCapacity: 36) { writeAPNsID(into: $0) }
    }

    /// Appends the 36 bytes of ``apnsIDString`` to `bytes`, with no string in between: a request's header
    /// block is written straight from the id.
    public func appendAPNsID(to bytes: inout [UInt8]) {
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: 36))
        bytes.withUnsafeMutableBufferPointer { buffer in
            _ = writeAPNsID(into: UnsafeMutableBufferPointer(rebasing: buffer[start..<(start + 36)]))
        }
    }

    private func writeAPNsID(into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        withUnsafeBytes(of: uuid) { bytes in
            var position = 0
            for (index, byte) in bytes.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    output[position] = UInt8(ascii: "-")
                    position += 1
                }
                output[position] = Self.hexDigit(byte >> 4)
                output[position + 1] = Self.hexDigit(byte & 0x0F)
                position += 2
            }
            return position
        }
    }

    /// Parses the 8-4-4-4-12 form in either case; `nil` for anything else.
    public init?(apnsIDString text: some StringProtocol) {
        var parsed: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let valid = text.utf8.withContiguousStorageIfAvailable { Self.parse($0, into: &parsed) }
            ?? Self.parse(Array(text.utf8), into: &parsed)
        guard valid else { return nil }
        self.init(uuid: parsed)
    }

    private static func parse(_ characters: some Collection<UInt8>, into parsed: inout uuid_t) -> Bool {
        guard characters.count == 36 else { return false }
        return withUnsafeMutableBytes(of: &parsed) { output in
            var byteIndex = 0
            var high: UInt8?
            for (position, character) in characters.enumerated() {
                if position == 8 || position == 13 || position == 18 || position == 23 {
                    guard character == UInt8(ascii: "-") else { return false }
                    continue
                }
                guard let nibble = nibbleValue(character) else { return false }
                if let pending = high {
                    output[byteIndex] = pending << 4 | nibble
                    byteIndex += 1
                    high = nil
                } else {
                    high = nibble
                }
            }
            return byteIndex == 16
        }
    }

    private static func nibbleValue(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
