import Foundation
import NIOCore
import PostgresNIO
@testable import PGPushStore
import Testing

/// An ``ArrayColumn`` must put on the wire exactly what PostgresNIO writes for the same values as a Swift array:
/// the outcome write's `unnest` reads both the same way.
@Suite struct ArrayColumnTests {
    private func bytes(_ value: some PostgresDynamicTypeEncodable) -> [UInt8] {
        var buffer = ByteBuffer()
        value.encode(into: &buffer, context: .default)
        return Array(buffer.readableBytesView)
    }

    private func column<Element>(_ values: [Element]) -> ArrayColumn<Element> {
        var column = ArrayColumn<Element>(reservingBytes: 8)
        for value in values { column.append(value) }
        return column
    }

    @Test func everyElementTypeOfTheOutcomeWriteMatchesASwiftArray() {
        let ints: [Int64] = [1, -7, Int64.max]
        let shorts: [Int16] = [200, 0, 410]
        let strings = ["", "a1b2c3", "BadDeviceToken", "ünïcode", String(repeating: "ab", count: 40)]
        let ids = [UUID(), UUID()]
        let dates = [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_764_000_000.123456), Date()]
        #expect(bytes(column(ints)) == bytes(ints))
        #expect(bytes(column(shorts)) == bytes(shorts))
        #expect(bytes(column(strings)) == bytes(strings))
        #expect(bytes(column(ids)) == bytes(ids))
        #expect(bytes(column(dates)) == bytes(dates))
        #expect(column(ints).psqlType == [Int64].psqlType)
        #expect(column(strings).psqlType == [String].psqlType)
        #expect(column(strings).count == strings.count)
    }

    @Test func anEmptyColumnIsAnEmptyArray() {
        #expect(bytes(column([Int64]())) == bytes([Int64]()))
        #expect(bytes(column([String]())) == bytes([String]()))
    }
}
