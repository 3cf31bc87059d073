import NIOCore
import PostgresNIO

/// One column of a batch's rows as a one-dimensional PostgreSQL array, for the `unnest` of a bulk write. The
/// values are encoded from the rows where they are, straight into the statement's bind buffer: no Swift array
/// of the column's values is built first (a group-committed write of outcomes has tens of thousands of rows).
struct ArrayColumn<Element: PostgresArrayEncodable & PostgresNonThrowingEncodable>: PostgresDynamicTypeEncodable {
    /// How many values `forEachValue` hands over.
    let count: Int
    /// Hands every value of the column, in row order, to its argument.
    let forEachValue: ((Element) -> Void) -> Void

    var psqlType: PostgresDataType { Element.psqlArrayType }
    var psqlFormat: PostgresFormat { .binary }

    /// The binary array format PostgreSQL's `array_recv` reads, as PostgresNIO writes a Swift array: the
    /// dimensions (0 for an empty array), no null bitmap, the element type, then the one dimension's length and
    /// lower bound, and each value after its length.
    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(count == 0 ? 0 : 1, as: UInt32.self)
        buffer.writeInteger(0, as: Int32.self)
        buffer.writeInteger(Element.psqlType.rawValue)
        guard count > 0 else { return }
        buffer.writeInteger(Int32(count))
        buffer.writeInteger(1, as: Int32.self)
        var written = 0
        forEachValue { value in
            let lengthIndex = buffer.writerIndex
            buffer.writeInteger(0, as: Int32.self)
            value.encode(into: &buffer, context: context)
            buffer.setInteger(Int32(buffer.writerIndex - lengthIndex - 4), at: lengthIndex)
            written += 1
        }
        precondition(written == count, "an array column handed over \(written) values, not the \(count) it declared")
    }
}
