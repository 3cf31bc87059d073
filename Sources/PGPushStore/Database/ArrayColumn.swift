import NIOCore
import PostgresNIO

/// One column of a batch's rows as a one-dimensional PostgreSQL array, for the `unnest` of a bulk write. Each
/// value is encoded as it is appended, so a batch's rows are read once for all their columns, and the
/// statement's bind buffer takes the column in one copy: no Swift array of the column's values is built first
/// (a group-committed write of outcomes has tens of thousands of rows).
struct ArrayColumn<Element: PostgresArrayEncodable & PostgresNonThrowingEncodable>: PostgresDynamicTypeEncodable {
    private(set) var count = 0
    /// The values so far, each after its length, as the binary array format lays them out.
    private var values: ByteBuffer

    init(reservingBytes bytes: Int = 0) {
        values = ByteBufferAllocator().buffer(capacity: bytes)
    }

    mutating func append(_ value: Element) {
        let lengthIndex = values.writerIndex
        values.writeInteger(0, as: Int32.self)
        value.encode(into: &values, context: .default)
        values.setInteger(Int32(values.writerIndex - lengthIndex - 4), at: lengthIndex)
        count += 1
    }

    var psqlType: PostgresDataType { Element.psqlArrayType }
    var psqlFormat: PostgresFormat { .binary }

    /// The binary array format PostgreSQL's `array_recv` reads, as PostgresNIO writes a Swift array: the
    /// dimensions (0 for an empty array), no null bitmap, the element type, then the one dimension's length and
    /// lower bound, and the values.
    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(count == 0 ? 0 : 1, as: UInt32.self)
        buffer.writeInteger(0, as: Int32.self)
        buffer.writeInteger(Element.psqlType.rawValue)
        guard count > 0 else { return }
        buffer.writeInteger(Int32(count))
        buffer.writeInteger(1, as: Int32.self)
        buffer.writeImmutableBuffer(values)
    }
}
