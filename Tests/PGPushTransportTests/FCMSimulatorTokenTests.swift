import CryptoExtras
import Foundation
import PGPushCore
import PGPushSimulator
import Testing

@Suite("FCM simulator: OAuth token endpoint", .timeLimit(.minutes(1)), .network)
struct FCMSimulatorTokenTests {
    @Test func goodAssertionGetsABearerToken() async throws {
        try await FCMSimulatorHarness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let outcome = try await harness.exchange(client)
            #expect(outcome.status == 200, "\(outcome)")
            #expect(outcome.headers["content-type"]?.hasPrefix("application/json") == true)
            let json = try #require(outcome.json)
            #expect((json["access_token"] as? String)?.isEmpty == false)
            #expect(json["expires_in"] as? Int == 3600)
            #expect(json["token_type"] as? String == "Bearer")
            // pgpush's own parser reads it.
            let parsed = try FCMAccessToken.parse(Data(try #require(outcome.bodyText).utf8), receivedAt: harness.clock.now)
            #expect(parsed.value == json["access_token"] as? String)

            // A second exchange is another token, and both are counted under the client email.
            let second = try await harness.accessToken(client)
            #expect(second != parsed.value)
            let statistics = harness.simulator.statistics
            #expect(statistics.tokenExchanges == [FCMSimulatorHarness.clientEmail: 2])
            #expect(statistics.tokenExchangesTotal == 2)
            #expect(statistics.tokenRequests == 2)
            #expect(statistics.count(status: 200) == 2)
        }
    }

    @Test func theAccessTokenLifetimeIsConfigurable() async throws {
        try await FCMSimulatorHarness.with(configure: { $0.accessTokenLifetime = .seconds(120) }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let outcome = try await harness.exchange(client)
            #expect(outcome.json?["expires_in"] as? Int == 120)
        }
    }

    enum BadAssertion: String, CaseIterable, Sendable {
        case wrongKey, expired, wrongAudience, wrongAudiencePath, unknownIssuer, wrongKeyID, tooLong, garbage
    }

    @Test(arguments: BadAssertion.allCases)
    func badAssertionsAreInvalidGrant(_ bad: BadAssertion) async throws {
        try await FCMSimulatorHarness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let tokenURI = try #require(URL(string: harness.tokenURI))
            let assertion: String
            switch bad {
            case .wrongKey:
                assertion = try harness.assertion(for: FCMSimulatorHarness.account(key: fcmSimulatorUntrustedKey, tokenURI: tokenURI))
            case .expired:
                assertion = try harness.assertion(issuedAt: harness.clock.now.addingTimeInterval(-7200))
            case .wrongAudience:
                assertion = try harness.assertion(for: FCMSimulatorHarness.account(
                    tokenURI: URL(string: "https://oauth2.googleapis.com/token")!))
            case .wrongAudiencePath:
                assertion = try harness.assertion(for: FCMSimulatorHarness.account(
                    tokenURI: URL(string: "https://127.0.0.1:\(harness.port)/oauth/token")!))
            case .unknownIssuer:
                assertion = try harness.assertion(for: FCMSimulatorHarness.account(
                    clientEmail: "stranger@demo-project.iam.gserviceaccount.com", tokenURI: tokenURI))
            case .wrongKeyID:
                assertion = try harness.assertion(for: FCMSimulatorHarness.account(keyID: "another-key", tokenURI: tokenURI))
            case .tooLong:
                // Signed by the right key, but living longer than an hour.
                assertion = try Self.unsafeAssertion(harness: harness, lifetime: 7200)
            case .garbage:
                assertion = "not.a.jwt"
            }
            let outcome = try await harness.exchange(client, assertion: assertion)
            #expect(outcome.status == 400, "\(outcome)")
            let json = try #require(outcome.json)
            #expect(json["error"] as? String == "invalid_grant")
            #expect((json["error_description"] as? String)?.isEmpty == false)
            #expect(FCMOAuthError.parse(status: 400, body: Data(try #require(outcome.bodyText).utf8)).error == "invalid_grant")
            let statistics = harness.simulator.statistics
            #expect(statistics.tokenExchangesTotal == 0)
            #expect(statistics.tokenExchangesRefused == 1)
            #expect(statistics.count(code: "invalid_grant") == 1)
        }
    }

    @Test func malformedTokenRequestsAreOAuthErrors() async throws {
        try await FCMSimulatorHarness.with { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            let assertion = try harness.assertion()
            let json = try await harness.exchange(client, assertion: assertion, contentType: "application/json")
            #expect(json.status == 400)
            #expect(json.json?["error"] as? String == "invalid_request")
            let grant = try await harness.exchange(client, body: "grant_type=client_credentials&assertion=\(assertion)")
            #expect(grant.json?["error"] as? String == "unsupported_grant_type")
            let missing = try await harness.exchange(client, body: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer")
            #expect(missing.json?["error"] as? String == "invalid_request")
            let get = try await client.request(method: "GET", path: "/token", headers: [], body: nil)
            #expect(get.status == 404)
        }
    }

    @Test func anExactAudienceIsComparedAsText() async throws {
        let audience = "https://oauth2.googleapis.com/token"
        try await FCMSimulatorHarness.with(configure: { $0.tokenAudience = audience }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            // The simulator's own URI is no longer good enough …
            let local = try await harness.exchange(client)
            #expect(local.status == 400)
            #expect(local.json?["error"] as? String == "invalid_grant")
            // … but Google's is.
            let google = try await harness.exchange(client, assertion: harness.assertion(
                for: FCMSimulatorHarness.account(tokenURI: URL(string: audience)!)))
            #expect(google.status == 200, "\(google)")
        }
    }

    @Test func audiencesMayNameTheCertificateHostNames() async throws {
        try await FCMSimulatorHarness.with(configure: { $0.certificateHostnames = ["fcm-simulator"] }) { harness in
            let client = try await harness.connect()
            defer { Task { await client.close() } }
            for host in ["localhost", "fcm-simulator", "LOCALHOST"] {
                let uri = try #require(URL(string: "https://\(host):\(harness.port)/token"))
                let outcome = try await harness.exchange(client, assertion: harness.assertion(
                    for: FCMSimulatorHarness.account(tokenURI: uri)))
                #expect(outcome.status == 200, "\(host): \(outcome)")
            }
            let stranger = try await harness.exchange(client, assertion: harness.assertion(
                for: FCMSimulatorHarness.account(tokenURI: URL(string: "https://example.com:\(harness.port)/token")!)))
            #expect(stranger.status == 400)
        }
    }

    /// An RS256 JWT with the right claims but a lifetime FCMAssertionSigner would clamp.
    static func unsafeAssertion(harness: FCMSimulatorHarness, lifetime: Int64) throws -> String {
        let iat = Int64(harness.clock.now.timeIntervalSince1970)
        let header = #"{"alg":"RS256","typ":"JWT","kid":"\#(FCMSimulatorHarness.keyID)"}"#
        let claims = #"{"iss":"\#(FCMSimulatorHarness.clientEmail)","scope":"\#(FCMAssertionSigner.scope)","aud":"\#(harness.tokenURI)","iat":\#(iat),"exp":\#(iat + lifetime)}"#
        let input = SimulatorTestSigner.base64URL(Data(header.utf8)) + "." + SimulatorTestSigner.base64URL(Data(claims.utf8))
        let signature = try fcmSimulatorTestKey.signature(for: Data(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + SimulatorTestSigner.base64URL(signature.rawRepresentation)
    }
}

extension SimulatorRawClient.Outcome {
    var bodyText: String? { if case .response(_, _, let body) = self { body } else { nil } }
}
