import Crypto
import Foundation
import PGPushSimulator
import Testing

@Suite("APNs simulator: provider tokens and stream limits", .network)
struct SimulatorAuthTests {
    let path = "/3/device/" + SimulatorHarness.token(11)
    let body = SimulatorHarness.payload

    @Test(.timeLimit(.minutes(1)))
    func missingAndInvalidProviderTokens() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            let noAuth = [("apns-topic", SimulatorHarness.topic)]
            #expect(try await client.request(path: path, headers: noAuth, body: body).reason == "MissingProviderToken")

            let garbage = harness.headers(jwt: "not.a.jwt")
            let invalid = try await client.request(path: path, headers: garbage, body: body)
            #expect(invalid.status == 403)
            #expect(invalid.reason == "InvalidProviderToken")

            let stranger = SimulatorTestSigner()  // same team and key id, different private key
            let forged = try await client.request(
                path: path, headers: harness.headers(jwt: try stranger.token(issuedAt: harness.clock.now)), body: body)
            #expect(forged.reason == "InvalidProviderToken")

            let unknownKey = try harness.signer.token(issuedAt: harness.clock.now, keyID: "OTHERKEY00")
            #expect(try await client.request(path: path, headers: harness.headers(jwt: unknownKey), body: body).reason
                == "InvalidProviderToken")
            #expect(harness.simulator.ledger.acceptedCount == 0)
            await client.close()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func expiredAndTooFrequentTokens() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            #expect(try await client.request(path: path, headers: harness.headers(), body: body).status == 200)

            // A second new token within 20 minutes of the first is a refresh too many.
            let early = try harness.signer.token(issuedAt: harness.clock.now)
            let tooSoon = try await client.request(path: path, headers: harness.headers(jwt: early), body: body)
            #expect(tooSoon.status == 429)
            #expect(tooSoon.reason == "TooManyProviderTokenUpdates")
            #expect(harness.simulator.statistics.tooManyProviderTokenUpdatesSent == 1)

            // 30 minutes later the first token is still valid, and a new one is accepted.
            harness.clock.advance(by: 30 * 60)
            #expect(try await client.request(path: path, headers: harness.headers(), body: body).status == 200)
            let refreshed = try harness.signer.token(issuedAt: harness.clock.now)
            #expect(try await client.request(path: path, headers: harness.headers(jwt: refreshed), body: body).status == 200)

            // 61 minutes after it was issued, the first token has expired.
            harness.clock.advance(by: 31 * 60)
            let expired = try await client.request(path: path, headers: harness.headers(), body: body)
            #expect(expired.status == 403)
            #expect(expired.reason == "ExpiredProviderToken")
            #expect(try await client.request(path: path, headers: harness.headers(jwt: refreshed), body: body).status == 200)

            let statistics = harness.simulator.statistics
            #expect(statistics.distinctProviderTokens["\(harness.signer.teamID).\(harness.signer.keyID)"] == 3)
            await client.close()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func connectionIsBoundToItsFirstKey() async throws {
        let second = SimulatorTestSigner(keyID: "KEY7654321")
        try await SimulatorHarness.with(configure: {
            $0.tokenKeys.append(SimulatorTokenKey(teamID: second.teamID, keyID: second.keyID, publicKey: second.key.publicKey))
        }) { harness in
            let otherToken = try second.token(issuedAt: harness.clock.now)
            let client = try await harness.connect()
            #expect(try await client.request(path: path, headers: harness.headers(), body: body).status == 200)
            let unrelated = try await client.request(path: path, headers: harness.headers(jwt: otherToken), body: body)
            #expect(unrelated.status == 403)
            #expect(unrelated.reason == "UnrelatedKeyIdInToken")
            await client.close()

            // A new connection may use the other key.
            let fresh = try await harness.connect()
            let other = try await fresh.request(path: path, headers: harness.headers(jwt: otherToken), body: body)
            #expect(other.status == 200, "\(other)")
            await fresh.close()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func oneStreamUntilAuthenticatedThenAThousand() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            try await client.wait { !$0.maxConcurrentStreamsSettings.isEmpty }
            #expect(client.snapshot.maxConcurrentStreamsSettings == [1])

            // A second stream while the first is open exceeds the limit of 1: refused, counted.
            let first = try client.send(path: path, headers: harness.headers(), body: nil, endStream: false)
            let second = try client.send(path: path, headers: harness.headers(), body: body)
            #expect(try await client.outcome(second) == .reset(code: 0x7))
            #expect(harness.simulator.statistics.streamLimitViolations == 1)

            client.finish(streamID: first, body: body)
            #expect(try await client.outcome(first).status == 200)
            try await client.wait { $0.maxConcurrentStreamsSettings.count == 2 }
            #expect(client.snapshot.maxConcurrentStreamsSettings == [1, 1000])

            // Now many streams at once are fine.
            var ids: [UInt32] = []
            for index in 0..<50 {
                ids.append(try client.send(path: "/3/device/\(SimulatorHarness.token(100 + index))",
                                           headers: harness.headers(), body: body))
            }
            for id in ids { #expect(try await client.outcome(id).status == 200) }
            let statistics = harness.simulator.statistics
            #expect(statistics.streamLimitViolations == 1)
            #expect(statistics.maximumConcurrentStreamsObserved >= 2)
            #expect(harness.simulator.ledger.acceptedCount == 51)
            await client.close()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func rejectedRequestsKeepTheLimitAtOne() async throws {
        try await SimulatorHarness.with { harness in
            let client = try await harness.connect()
            let dead = "/3/device/" + SimulatorHarness.token(1, prefix: "dead")
            #expect(try await client.request(path: dead, headers: harness.headers(), body: body).status == 410)
            try await Task.sleep(for: .milliseconds(50))
            #expect(client.snapshot.maxConcurrentStreamsSettings == [1])
            await client.close()
        }
    }
}
