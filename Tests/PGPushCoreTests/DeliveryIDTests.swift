import Foundation
import Testing
@testable import PGPushCore

@Suite struct DeliveryIDTests {
    // Vectors computed independently with Python:
    //   python3 -c 'import uuid; print(uuid.uuid5(uuid.UUID("5abad2b6-23d9-4ba4-8198-c02f154c442d"), "1:abcd"))'
    @Test func matchesKnownAnswers() {
        #expect(DeliveryID.make(jobID: 1, token: "abcd").uuidString.lowercased() == "42ba5028-3cd9-50da-b92d-5f4761998b10")
        #expect(
            DeliveryID.make(jobID: .max, token: String(repeating: "AB", count: 32)).uuidString.lowercased()
                == "f9b4e900-0ac1-535e-92cf-4da369eb2135"
        )
    }

    @Test func matchesRFCNamespaceExample() {
        // uuid.uuid5(uuid.NAMESPACE_DNS, "python.org")
        let dns = UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!
        #expect(DeliveryID.uuidV5(namespace: dns, name: "python.org").uuidString.lowercased() == "886313e1-3b8a-5372-9b90-0c9aee199e5d")
    }

    @Test func deterministicAndCaseInsensitiveInToken() {
        #expect(DeliveryID.make(jobID: 7, token: "ABCDEF") == DeliveryID.make(jobID: 7, token: "abcdef"))
        #expect(DeliveryID.make(jobID: 7, token: "abcdef") != DeliveryID.make(jobID: 8, token: "abcdef"))
        #expect(DeliveryID.make(jobID: 7, token: "abcdef") != DeliveryID.make(jobID: 7, token: "abcdee"))
    }

    /// The id hashed in place equals the version-5 id of the name built as a string, for job ids of every length
    /// and sign and tokens at the edges of the lowercase check (`@`, `[`, `Z`, `` ` ``, non-ASCII).
    @Test(arguments: [Int64(0), 9, 10, 12_345, -1, Int64.max, Int64.min])
    func hashingInPlaceEqualsTheNameAsAString(jobID: Int64) {
        let tokens = ["", "a", "@[`{", "zZ", String(repeating: "0f", count: 32), "ÄbC", "web:https://push.example/x?y=Z"]
        for token in tokens {
            #expect(DeliveryID.make(jobID: jobID, token: token)
                == DeliveryID.uuidV5(namespace: DeliveryID.namespace, name: "\(jobID):\(token.lowercased())"), "\(jobID) \(token)")
        }
    }
}
