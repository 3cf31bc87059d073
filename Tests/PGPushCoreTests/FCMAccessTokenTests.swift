import Foundation
import Testing
@testable import PGPushCore

private let receivedAt = Date(timeIntervalSince1970: 1_700_000_000)
private let secretToken = "ya29.c.b0AXv0zTOpgpushSECRETtoken-_0123456789"

private func answer(_ fields: [String: Any]) -> Data {
    try! JSONSerialization.data(withJSONObject: fields)
}

private func rejection(_ body: Data) -> PGPushError? {
    do {
        let token = try FCMAccessToken.parse(body, receivedAt: receivedAt)
        Issue.record("accepted \(token)")
        return nil
    } catch {
        return error
    }
}

@Suite struct FCMAccessTokenTests {
    @Test func parsesGooglesAnswer() throws {
        let body = Data(#"{"access_token":"\#(secretToken)","expires_in":3599,"token_type":"Bearer"}"#.utf8)
        let token = try FCMAccessToken.parse(body, receivedAt: receivedAt)
        #expect(token.value == secretToken)
        #expect(token.expiresAt == receivedAt.addingTimeInterval(3599))
        #expect(token.authorizationHeaderValue == "Bearer \(secretToken)")
        #expect(token.remainingLifetime(at: receivedAt.addingTimeInterval(99)) == 3500)
    }

    @Test(arguments: ["bearer", "BEARER", "Bearer"])
    func tokenTypeIsCaseInsensitive(type: String) throws {
        let token = try FCMAccessToken.parse(answer(["access_token": "t", "expires_in": 60, "token_type": type]), receivedAt: receivedAt)
        #expect(token.expiresAt == receivedAt.addingTimeInterval(60))
    }

    @Test func rejectsBadAnswersWithoutQuotingThem() {
        let cases: [(body: Data, field: String)] = [
            (Data("not json".utf8), "JSON object"),
            (Data("[]".utf8), "JSON object"),
            (Data(), "JSON object"),
            (answer(["expires_in": 3599, "token_type": "Bearer"]), "access_token"),
            (answer(["access_token": "", "expires_in": 3599, "token_type": "Bearer"]), "access_token"),
            (answer(["access_token": 12, "expires_in": 3599, "token_type": "Bearer"]), "access_token"),
            (answer(["access_token": "a b", "expires_in": 3599, "token_type": "Bearer"]), "access_token"),
            (answer(["access_token": "a\r\nX-Evil: 1", "expires_in": 3599, "token_type": "Bearer"]), "access_token"),
            (answer(["access_token": secretToken, "expires_in": 3599]), "token_type"),
            (answer(["access_token": secretToken, "expires_in": 3599, "token_type": "MAC"]), "token_type"),
            (answer(["access_token": secretToken, "token_type": "Bearer"]), "expires_in"),
            (answer(["access_token": secretToken, "expires_in": 0, "token_type": "Bearer"]), "expires_in"),
            (answer(["access_token": secretToken, "expires_in": -5, "token_type": "Bearer"]), "expires_in"),
            (answer(["access_token": secretToken, "expires_in": "3599", "token_type": "Bearer"]), "expires_in"),
            (Data(#"{"access_token":"\#(secretToken)","expires_in":true,"token_type":"Bearer"}"#.utf8), "expires_in"),
        ]
        for (body, field) in cases {
            guard let error = rejection(body) else { continue }
            #expect(error.code == .invalidCredential)
            #expect(error.message.contains(field), "\(error.message)")
            #expect(!error.debugDescription.contains(secretToken))
        }
    }

    @Test func descriptionHidesTheToken() {
        let token = FCMAccessToken(value: secretToken, expiresAt: receivedAt)
        for text in [token.description, String(reflecting: token), "\(token)"] {
            #expect(!text.contains(secretToken))
            #expect(text.contains("1700000000"))
        }
    }

    @Test func refreshPolicy() {
        let token = FCMAccessToken(value: "t", expiresAt: receivedAt.addingTimeInterval(3599))
        let policy = FCMAccessTokenRefreshPolicy()
        #expect(policy.refreshBeforeExpiry == 300)
        #expect(!policy.needsRefresh(token, now: receivedAt))
        #expect(!policy.needsRefresh(token, now: receivedAt.addingTimeInterval(3299)))
        #expect(!policy.needsRefresh(token, now: receivedAt.addingTimeInterval(3299.5).addingTimeInterval(-0.5)))
        #expect(policy.needsRefresh(token, now: receivedAt.addingTimeInterval(3300)))
        #expect(policy.needsRefresh(token, now: receivedAt.addingTimeInterval(4000)))
        let tight = FCMAccessTokenRefreshPolicy(refreshBeforeExpiry: 60)
        #expect(!tight.needsRefresh(token, now: receivedAt.addingTimeInterval(3500)))
        #expect(tight.needsRefresh(token, now: receivedAt.addingTimeInterval(3540)))
    }
}

@Suite struct FCMOAuthErrorTests {
    @Test func parsesGooglesRefusal() {
        let body = Data(#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#.utf8)
        let error = FCMOAuthError.parse(status: 400, body: body)
        #expect(error.error == "invalid_grant")
        #expect(error.errorDescription == "Invalid JWT Signature.")
        #expect(error.description == "invalid_grant: Invalid JWT Signature.")
    }

    @Test func garbageGivesTheStatus() {
        for body in [Data(), Data("<html>502 Bad Gateway</html>".utf8), Data(#"{"error":{"code":400}}"#.utf8), Data("[1]".utf8)] {
            let error = FCMOAuthError.parse(status: 502, body: body)
            #expect(error.error == "HTTP502")
            #expect(error.description == "HTTP502")
        }
        #expect(FCMOAuthError.parse(status: 400, body: Data(#"{"error":"no spaces allowed here"}"#.utf8)).error == "HTTP400")
        #expect(FCMOAuthError.parse(status: 400, body: Data(#"{"error":"\#(String(repeating: "x", count: 65))"}"#.utf8)).error == "HTTP400")
    }

    @Test func neverEchoesATokenOrAnAssertion() throws {
        let jwt = try FCMAssertionSigner(account: try fcmTestAccount()).sign(issuedAt: Date()).jwt
        let body = try JSONSerialization.data(withJSONObject: [
            "error": "invalid_grant",
            "error_description": "Bad assertion \(jwt) for token \(secretToken)\nsecond line",
        ])
        let error = FCMOAuthError.parse(status: 400, body: body)
        #expect(error.error == "invalid_grant")
        #expect(!error.description.contains(jwt.prefix(30)))
        #expect(!error.description.contains(secretToken))
        #expect(error.description.hasPrefix("invalid_grant: Bad assertion "))
        #expect(!error.description.contains("\n"))
        #expect(error.description.count <= "invalid_grant: ".count + 201)
        let long = try JSONSerialization.data(withJSONObject: ["error": "invalid_request", "error_description": String(repeating: "word ", count: 200)])
        #expect(FCMOAuthError.parse(status: 400, body: long).errorDescription?.count == 201)
    }
}
