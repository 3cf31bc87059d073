import NIOCore
import NIOHPACK

/// HTTP/2 frames built by hand, byte by byte (RFC 9113 §4.1 and §6), for driving the nghttp2 engine without
/// a server, and a reader for the frames it writes.
enum TestFrame {
    enum Kind: UInt8 {
        case data = 0x0, headers = 0x1, priority = 0x2, rstStream = 0x3, settings = 0x4, pushPromise = 0x5
        case ping = 0x6, goAway = 0x7, windowUpdate = 0x8, continuation = 0x9
    }

    static let endStream: UInt8 = 0x1
    static let ack: UInt8 = 0x1
    static let endHeaders: UInt8 = 0x4
    static let padded: UInt8 = 0x8

    /// What every client sends first.
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    static func frame(_ type: UInt8, flags: UInt8 = 0, stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = [
            UInt8(truncatingIfNeeded: payload.count >> 16), UInt8(truncatingIfNeeded: payload.count >> 8),
            UInt8(truncatingIfNeeded: payload.count), type, flags,
        ]
        bytes += bigEndian(stream & 0x7FFF_FFFF)
        return bytes + payload
    }

    static func frame(_ kind: Kind, flags: UInt8 = 0, stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
        frame(kind.rawValue, flags: flags, stream: stream, payload)
    }

    static func settings(_ entries: [(id: UInt16, value: UInt32)]) -> [UInt8] {
        frame(.settings, stream: 0, entries.flatMap { bigEndian($0.id) + bigEndian($0.value) })
    }

    static let settingsAck = frame(.settings, flags: ack, stream: 0, [])

    /// A header block of literal fields that touch no HPACK table, so blocks can be built in any order.
    static func headerBlock(_ fields: [(String, String)]) -> [UInt8] {
        var headers = HPACKHeaders()
        for (name, value) in fields { headers.add(name: name, value: value, indexing: .nonIndexable) }
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        var buffer = ByteBuffer()
        try! encoder.encode(headers: headers, to: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// A header block of literal fields written byte by byte (never indexed, new name, no Huffman coding), so a
    /// name may be any bytes at all; each name and value is shorter than 127 bytes.
    static func rawHeaderBlock(_ fields: [([UInt8], [UInt8])]) -> [UInt8] {
        fields.flatMap { name, value in [0x10, UInt8(name.count)] + name + [UInt8(value.count)] + value }
    }

    static func headers(stream: UInt32, _ fields: [(String, String)], endStream: Bool) -> [UInt8] {
        frame(.headers, flags: endHeaders | (endStream ? Self.endStream : 0), stream: stream, headerBlock(fields))
    }

    static func data(stream: UInt32, _ bytes: [UInt8], endStream: Bool) -> [UInt8] {
        frame(.data, flags: endStream ? Self.endStream : 0, stream: stream, bytes)
    }

    /// An answer: `:status`, then the body in DATA frames of at most 16,384 bytes (the default frame size).
    static func answer(stream: UInt32, status: Int, body: [UInt8] = []) -> [UInt8] {
        guard !body.isEmpty else { return headers(stream: stream, [(":status", "\(status)")], endStream: true) }
        var bytes = headers(stream: stream, [(":status", "\(status)")], endStream: false)
        var offset = 0
        while offset < body.count {
            let end = min(offset + 16_384, body.count)
            bytes += data(stream: stream, Array(body[offset..<end]), endStream: end == body.count)
            offset = end
        }
        return bytes
    }

    static func rstStream(stream: UInt32, code: UInt32) -> [UInt8] {
        frame(.rstStream, stream: stream, bigEndian(code))
    }

    static func goAway(lastStreamID: UInt32, code: UInt32, debug: String = "") -> [UInt8] {
        frame(.goAway, stream: 0, bigEndian(lastStreamID) + bigEndian(code) + Array(debug.utf8))
    }

    static func ping(_ payload: UInt64, ack isAck: Bool = false) -> [UInt8] {
        frame(.ping, flags: isAck ? ack : 0, stream: 0, bigEndian(payload))
    }

    static func windowUpdate(stream: UInt32, increment: UInt32) -> [UInt8] {
        frame(.windowUpdate, stream: stream, bigEndian(increment))
    }

    static func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }

    /// One frame as written on the wire.
    struct Parsed: Equatable {
        var type: UInt8
        var flags: UInt8
        var stream: UInt32
        var payload: [UInt8]

        var kind: Kind? { Kind(rawValue: type) }
        func has(_ flag: UInt8) -> Bool { flags & flag != 0 }
        /// The payload's `index`th four bytes as a big-endian number (an error code, a window increment).
        func word(_ index: Int) -> UInt32 { payload[(index * 4)..<(index * 4 + 4)].reduce(0) { $0 << 8 | UInt32($1) } }
    }

    /// Splits what a client wrote into frames; the connection preface, if first, is checked and left out.
    static func parse(_ bytes: [UInt8]) -> [Parsed] {
        var offset = bytes.starts(with: preface) ? preface.count : 0
        var frames: [Parsed] = []
        while offset + 9 <= bytes.count {
            let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            let stream = bytes[(offset + 5)..<(offset + 9)].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } & 0x7FFF_FFFF
            let end = min(offset + 9 + length, bytes.count)
            frames.append(Parsed(type: bytes[offset + 3], flags: bytes[offset + 4], stream: stream, payload: Array(bytes[(offset + 9)..<end])))
            offset = end
        }
        return frames
    }
}
