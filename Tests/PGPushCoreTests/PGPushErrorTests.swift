import Testing
import PGPushCore

private struct SecretCarrier: Error, CustomStringConvertible {
    var description: String { "password=hunter2" }
}

@Suite struct PGPushErrorTests {
    @Test func descriptionHidesDetailAndUnderlying() {
        let error = PGPushError(
            .databaseUnavailable, "cannot reach the database",
            detail: "postgres://push:hunter2@db/push", underlying: SecretCarrier()
        )
        #expect(error.description == "databaseUnavailable: cannot reach the database")
        #expect(!error.description.contains("hunter2"))
        #expect(!String(describing: error).contains("hunter2"))
        #expect(!"\(error)".contains("hunter2"))
        #expect(error.debugDescription.contains("hunter2"))
        #expect(error.debugDescription.contains("PGPushErrorTests.swift"))
    }

    @Test func codesAreDistinctAndNamed() {
        let codes: [PGPushError.Code] = [
            .invalidConfiguration, .invalidCredential, .credentialUnreadable, .databaseUnavailable,
            .invalidInput, .apnsConfiguration, .internal,
        ]
        #expect(Set(codes).count == codes.count)
        #expect(PGPushError.Code.invalidCredential.description == "invalidCredential")
        #expect(PGPushError(.internal, "x").code == .internal)
    }
}
