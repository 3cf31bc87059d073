import Crypto
import Foundation
import Testing
import PGPushCore

@Suite struct ProviderTokenRefreshTests {
    let signer: ProviderTokenSigner
    let start = Date(timeIntervalSince1970: 1_700_000_000)

    init() throws {
        signer = try ProviderTokenSigner(
            teamID: "TEAM123456", keyID: "KEY1234567", privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation
        )
    }

    @Test func policyCrossingFiftyAndSixtyMinutes() throws {
        let policy = ProviderTokenRefreshPolicy()
        let clock = ManualWallClock(start)
        let token = try signer.sign(issuedAt: clock.now())

        clock.advance(by: 50 * 60 - 1)
        #expect(!policy.needsRefresh(token, now: clock.now()))
        clock.advance(by: 1)
        #expect(policy.needsRefresh(token, now: clock.now()))
        clock.set(start.addingTimeInterval(60 * 60))
        #expect(policy.needsRefresh(token, now: clock.now()))

        // A misconfigured refreshAfter beyond the maximum still refreshes at the maximum.
        let lax = ProviderTokenRefreshPolicy(refreshAfter: 2 * 60 * 60)
        #expect(!lax.needsRefresh(token, now: start.addingTimeInterval(60 * 60 - 1)))
        #expect(lax.needsRefresh(token, now: start.addingTimeInterval(60 * 60)))
    }

    @Test func mayReplaceRule() throws {
        let policy = ProviderTokenRefreshPolicy()
        let token = try signer.sign(issuedAt: start)
        #expect(!policy.mayReplace(token, now: start.addingTimeInterval(20 * 60 - 1)))
        #expect(policy.mayReplace(token, now: start.addingTimeInterval(20 * 60)))
        // Older than the maximum: always replaceable, whatever minimumAge says.
        let strict = ProviderTokenRefreshPolicy(minimumAge: 3 * 60 * 60)
        #expect(!strict.mayReplace(token, now: start.addingTimeInterval(59 * 60)))
        #expect(strict.mayReplace(token, now: start.addingTimeInterval(60 * 60)))
    }

    @Test(.timeLimit(.minutes(1)))
    func mintsOnceForManyConcurrentCallers() async throws {
        let source = LocalProviderTokenSource(signer: signer, clock: ManualWallClock(start))
        let jwts = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<200 {
                group.addTask { try await source.currentToken().jwt }
            }
            var all = Set<String>()
            for try await jwt in group { all.insert(jwt) }
            return all
        }
        #expect(jwts.count == 1)
        #expect(await source.mintCount == 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func refreshesAtFiftyMinutes() async throws {
        let clock = ManualWallClock(start)
        let source = LocalProviderTokenSource(signer: signer, clock: clock)
        let first = try await source.currentToken()
        clock.advance(by: 50 * 60 - 1)
        #expect(try await source.currentToken() == first)
        clock.advance(by: 1)
        let second = try await source.currentToken()
        #expect(second != first)
        #expect(second.issuedAt == start.addingTimeInterval(50 * 60))
        #expect(await source.mintCount == 2)
    }

    @Test(.timeLimit(.minutes(1)))
    func expiredRejectionRespectsMinimumAge() async throws {
        let clock = ManualWallClock(start)
        let source = LocalProviderTokenSource(signer: signer, clock: clock)
        let first = try await source.currentToken()

        clock.advance(by: 5 * 60)
        await source.reportRejected(first, reason: "ExpiredProviderToken")
        #expect(try await source.currentToken() == first, "a 5-minute-old token is not replaced")

        clock.advance(by: 15 * 60)
        let second = try await source.currentToken()
        #expect(second != first, "at 20 minutes the rejected token is replaced")
        #expect(await source.mintCount == 2)

        // A late report about the old token, or a reason a new token cannot fix, changes nothing.
        clock.advance(by: 25 * 60)
        await source.reportRejected(first, reason: "ExpiredProviderToken")
        await source.reportRejected(second, reason: "InvalidProviderToken")
        #expect(try await source.currentToken() == second)
        #expect(await source.mintCount == 2)
    }

    /// The transport takes the token at hand on every request and awaits the source only when there is none;
    /// the token at hand must never be one the source would not hand out itself.
    @Test(.timeLimit(.minutes(1)))
    func tokenAtHandFollowsRefreshAndRejection() async throws {
        let clock = ManualWallClock(start)
        let source = LocalProviderTokenSource(signer: signer, clock: clock)
        #expect(source.tokenAtHand == nil, "nothing minted yet")
        let first = try await source.currentToken()
        #expect(source.tokenAtHand == first)

        clock.advance(by: 50 * 60)
        #expect(source.tokenAtHand == nil, "due for refresh: the caller must go through the source")
        let second = try await source.currentToken()
        #expect(second != first)
        #expect(source.tokenAtHand == second)

        clock.advance(by: 5 * 60)
        await source.reportRejected(second, reason: "ExpiredProviderToken")
        #expect(source.tokenAtHand == nil, "a token APNs called expired is not at hand")
        #expect(try await source.currentToken() == second, "too young to replace, so the source still hands it out")
        #expect(source.tokenAtHand == nil, "but it stays off the fast path until replaced")

        clock.advance(by: 15 * 60)
        let third = try await source.currentToken()
        #expect(third != second)
        #expect(source.tokenAtHand == third)
    }
}
