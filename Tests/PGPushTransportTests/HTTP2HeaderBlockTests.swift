import Foundation
import NIOHPACK
import PGPushCore
import Testing

@testable import PGPushTransport

@Suite("A request's header block")
struct HTTP2HeaderBlockTests {
    @Test(arguments: [Int64(0), 7, 10, 4096, 1_700_000_000, -1, -905, Int64.max, Int64.min])
    func decimalValuesReadAsTheNumber(_ number: Int64) {
        var block = HTTP2HeaderBlock()
        block.add(name: "n", decimal: number)
        #expect(block[0].value == String(number))
    }

    @Test func fieldsKeepTheirOrderIndexingAndBytesWhenAppended() {
        var shared = HTTP2HeaderBlock()
        shared.add(name: "apns-topic", value: "com.example.app")
        shared.add(name: "apns-collapse-id", value: "c1", indexable: false)

        var block = HTTP2HeaderBlock()
        block.add(name: ":method", value: "POST")
        block.add(name: ":path", indexable: false) { $0.append(contentsOf: "/3/device/ab".utf8) }
        block.append(shared)
        block.add(name: "content-length", decimal: 12, indexable: false)

        let fields = (0..<block.count).map { block[$0] }
        #expect(fields.map(\.name) == [":method", ":path", "apns-topic", "apns-collapse-id", "content-length"])
        #expect(fields.map(\.value) == ["POST", "/3/device/ab", "com.example.app", "c1", "12"])
        #expect(fields.map(\.indexable) == [true, false, true, false, false])
        #expect(block.first(name: "apns-topic") == "com.example.app")
        #expect(block.first(name: "apns-id") == nil)
    }

    @Test func convertsToAndFromHPACKHeadersWithTheirIndexing() {
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":path", value: "/fcm/send", indexing: .nonIndexable)
        headers.add(name: "authorization", value: "Bearer x")
        headers.add(name: "empty", value: "")
        let block = HTTP2HeaderBlock(headers)
        let back = block.hpackHeaders
        #expect(back.map(\.name) == headers.map(\.name))
        #expect(back.map(\.value) == headers.map(\.value))
        #expect(back.map(\.indexable) == [.indexable, .nonIndexable, .indexable, .indexable])
    }

    @Test func anAPNsIDIsWrittenAsItsCanonicalText() {
        for _ in 0..<64 {
            let id = UUID()
            var bytes: [UInt8] = Array("x".utf8)
            id.appendAPNsID(to: &bytes)
            #expect(String(decoding: bytes.dropFirst(), as: UTF8.self) == id.uuidString.lowercased())
            #expect(id.apnsIDString == id.uuidString.lowercased())
        }
    }
}
