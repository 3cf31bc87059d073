import Foundation
import Testing
@testable import PGPushCore

@Suite struct UUIDAPNsStringTests {
    @Test func formatsLikeFoundationInLowercase() {
        for _ in 0..<200 {
            let id = UUID()
            #expect(id.apnsIDString == id.uuidString.lowercased())
        }
        #expect(UUID(uuidString: "00000000-0000-0000-0000-000000000000")!.apnsIDString == "00000000-0000-0000-0000-000000000000")
        #expect(UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!.apnsIDString == "ffffffff-ffff-ffff-ffff-ffffffffffff")
    }

    @Test func parsesEitherCaseAndRoundTrips() {
        for _ in 0..<200 {
            let id = UUID()
            #expect(UUID(apnsIDString: id.apnsIDString) == id)
            #expect(UUID(apnsIDString: id.uuidString) == id)
            #expect(UUID(apnsIDString: Substring(id.apnsIDString)) == id)
        }
    }

    @Test(arguments: [
        "",
        "42ba5028-3cd9-50da-b92d-5f4761998b1",  // one digit short
        "42ba5028-3cd9-50da-b92d-5f4761998b100",  // one digit long
        "42ba50283cd950dab92d5f4761998b10",  // no hyphens
        "42ba5028-3cd950da-b92d-5f4761998b10-",  // hyphen misplaced
        "42ba5028-3cd9-50da-b92d-5f4761998g10",  // not hex
        "{42ba5028-3cd9-50da-b92d-5f4761998b}",
    ])
    func rejectsAnythingButTheCanonicalShape(_ text: String) {
        #expect(UUID(apnsIDString: text) == nil)
    }
}
