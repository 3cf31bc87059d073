import NIOHPACK
import PGPushCore

/// A request's header block as one byte buffer and the fields that index into it: what the nghttp2 engine
/// hands to `nghttp2_submit_request` without copying, and what a request type can write without building a
/// string per field. The NIO engine reads it as ``hpackHeaders``.
///
/// A request type writes its fields in order: the pseudo-header fields (`:method`, `:scheme`, `:path`,
/// `:authority`) first, as HTTP/2 requires.
public struct HTTP2HeaderBlock: Sendable, Hashable {
    /// Where one field's name and value sit in ``bytes``: the name at `start`, its value right after it.
    struct Field: Sendable, Hashable {
        var start: Int32
        var nameCount: Int32
        var valueCount: Int32
        /// Whether HPACK may add the field to its dynamic table. A value unique to one request (a device
        /// token's path, a request id, a body's length) is not: inserting it would churn the table on both ends
        /// and evict the long-lived entries (the JWT above all) that make every other header one byte.
        var indexable: Bool

        var valueStart: Int { Int(start + nameCount) }
    }

    private(set) var bytes: [UInt8] = []
    private(set) var fields: [Field] = []

    public init() {}

    /// Room for `fields` fields of `bytes` bytes in all, so a request's block is two allocations.
    public init(reservingFields fields: Int, bytes: Int) {
        self.bytes.reserveCapacity(bytes)
        self.fields.reserveCapacity(fields)
    }

    /// The fields of an HPACK header block, in order, with their indexing (`.indexable` or not).
    public init(_ headers: HPACKHeaders) {
        self.init(reservingFields: headers.count, bytes: 256)
        for (name, value, indexing) in headers {
            add(name: name, value: value, indexable: indexing == .indexable)
        }
    }

    public var count: Int { fields.count }

    /// Appends a field.
    public mutating func add(name: String, value: String, indexable: Bool = true) {
        add(name: name, indexable: indexable) { $0.append(contentsOf: value.utf8) }
    }

    /// Appends a field whose value `writeValue` appends to the buffer it is given: a value built from parts
    /// (a path and a token, an id in hex, a number) is written once, with no string of its own.
    public mutating func add(name: String, indexable: Bool = true, writeValue: (inout [UInt8]) -> Void) {
        let start = bytes.count
        bytes.append(contentsOf: name.utf8)
        let nameCount = bytes.count - start
        writeValue(&bytes)
        fields.append(Field(start: Int32(start), nameCount: Int32(nameCount), valueCount: Int32(bytes.count - start - nameCount), indexable: indexable))
    }

    /// Appends a field whose value is `number` in decimal.
    public mutating func add(name: String, decimal number: Int64, indexable: Bool = true) {
        add(name: name, indexable: indexable) { bytes in number.withDecimalASCII { bytes.append(contentsOf: $0) } }
    }

    /// Appends every field of `other`, in order: a block of fields shared by many requests, written once.
    public mutating func append(_ other: HTTP2HeaderBlock) {
        let offset = Int32(bytes.count)
        bytes.append(contentsOf: other.bytes)
        for var field in other.fields {
            field.start += offset
            fields.append(field)
        }
    }

    /// The fields as NIO's HPACK headers, for the NIO engine and for tests.
    public var hpackHeaders: HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(fields.count)
        for index in fields.indices {
            let (name, value, indexable) = self[index]
            headers.add(name: name, value: value, indexing: indexable ? .indexable : .nonIndexable)
        }
        return headers
    }

    /// The field at `index`, as strings.
    public subscript(index: Int) -> (name: String, value: String, indexable: Bool) {
        let field = fields[index]
        let start = Int(field.start)
        let name = String(decoding: bytes[start..<(start + Int(field.nameCount))], as: UTF8.self)
        let value = String(decoding: bytes[field.valueStart..<(field.valueStart + Int(field.valueCount))], as: UTF8.self)
        return (name, value, field.indexable)
    }

    /// The value of the first field named `name`, if any.
    public func first(name: String) -> String? {
        fields.indices.lazy.map { self[$0] }.first { $0.name == name }?.value
    }

    /// Calls `body` with the block's bytes and fields, valid during the call only.
    func withFields<Result>(_ body: (UnsafeBufferPointer<UInt8>, [Field]) -> Result) -> Result {
        bytes.withUnsafeBufferPointer { body($0, fields) }
    }
}
