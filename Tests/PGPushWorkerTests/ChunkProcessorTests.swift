import Foundation
import PGPushCore
@testable import PGPushDispatcher
import PGPushDispatcherTesting
import PGPushStore
import Testing

/// The chunk processor on a fake pool: how each answer becomes the token's outcome, a retry, a token given
/// back or a dead token for the pruner, and what stops a chunk.
@Suite struct ChunkProcessorTests {
    @Test(.timeLimit(.minutes(1)))
    func deliveredTokensAreRecordedOnceAtTheClocksTime() async throws {
        let harness = ChunkHarness()
        let (completion, freed) = try await harness.process(harness.chunk(tokens: 5))
        #expect(harness.pool.tokens == ["t0", "t1", "t2", "t3", "t4"])
        #expect(completion.outcomes.map(\.token) == ["t0", "t1", "t2", "t3", "t4"])
        #expect(completion.outcomes.allSatisfy { $0.status == 200 && $0.reason == nil && $0.attempt == 1 })
        #expect(completion.outcomes.allSatisfy { $0.sentAt == harness.clock.now })
        #expect(completion.requeued.isEmpty)
        #expect(completion.answered == 5)
        #expect(freed == 5)
    }

    @Test(.timeLimit(.minutes(1)))
    func eachRequestCarriesTheDeterministicDeliveryIDItIsRecordedUnder() async throws {
        let harness = ChunkHarness()
        let (completion, _) = try await harness.process(harness.chunk(tokens: 3))
        for request in harness.pool.requests {
            let expected = DeliveryID.make(jobID: 1, token: request.token)
            #expect(request.headers["apns-id"]?.lowercased() == expected.uuidString.lowercased())
            #expect(completion.outcome(of: request.token)?.deliveryID == expected)
        }
        #expect(harness.pool.requests.allSatisfy { $0.headers["apns-topic"] == "com.example.app" })
    }

    @Test(.timeLimit(.minutes(1)))
    func a429IsRetriedAtTheNextAttemptAfterTheFullJitterWindow() async throws {
        let harness = ChunkHarness { _ in .now(.status(429, "TooManyRequests")) }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 4))
        #expect(completion.outcomes.isEmpty)
        #expect(completion.requeued.count == 1)
        let retry = try #require(completion.requeued.first)
        #expect(retry.tokens == ["t0", "t1", "t2", "t3"])
        #expect(retry.attempt == 2)
        #expect(retry.lastReason == "TooManyRequests")
        // A draw of .max takes the whole window before attempt 2: the base delay, 5 s.
        #expect(retry.notBefore == harness.clock.now.addingTimeInterval(5))
    }

    @Test(.timeLimit(.minutes(1)))
    func theBackoffWindowDoublesWithEachAttempt() async throws {
        let harness = ChunkHarness { _ in .now(.status(503, "ServiceUnavailable")) }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 1, attempt: 3))
        // Before attempt 4: 5 s · 2² = 20 s.
        #expect(completion.requeued.first?.attempt == 4)
        #expect(completion.requeued.first?.notBefore == harness.clock.now.addingTimeInterval(20))
    }

    @Test(.timeLimit(.minutes(1)))
    func seededJitterFallsInsideTheWindowAndRepeats() async throws {
        var first = ChunkHarness { _ in .now(.status(503, "ServiceUnavailable")) }
        let seed = SeededRandom(seed: 42)
        first.random = { seed.next() }
        var second = ChunkHarness { _ in .now(.status(503, "ServiceUnavailable")) }
        let again = SeededRandom(seed: 42)
        second.random = { again.next() }
        let a = try await first.process(first.chunk(tokens: 1, attempt: 2)).completion.requeued[0].notBefore
        let b = try await second.process(second.chunk(tokens: 1, attempt: 2)).completion.requeued[0].notBefore
        let wait = a.timeIntervalSince(first.clock.now)
        #expect(wait >= 0 && wait <= 10)
        #expect(a == b)
    }

    @Test(.timeLimit(.minutes(1)))
    func theLastAttemptRecordsTheTransientFailureAsFinal() async throws {
        let harness = ChunkHarness { _ in .now(.status(503, "ServiceUnavailable")) }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 2, attempt: RetryPolicy().maxAttempts))
        #expect(completion.requeued.isEmpty)
        #expect(completion.outcomes.count == 2)
        #expect(completion.outcomes.allSatisfy { $0.status == 503 && $0.reason == "ServiceUnavailable" && $0.attempt == 8 })
    }

    @Test(.timeLimit(.minutes(1)))
    func aRetryThatWouldComeAfterTheExpiryIsNotMade() async throws {
        let harness = ChunkHarness { _ in .now(.status(429, "TooManyRequests")) }
        let expiry = harness.clock.now.addingTimeInterval(2)
        let (completion, _) = try await harness.process(harness.chunk(tokens: 1, expiresAt: expiry))
        #expect(completion.requeued.isEmpty)
        #expect(completion.outcomes.first?.status == 429)
    }

    @Test(.timeLimit(.minutes(1)))
    func aTimeoutIsRetriedAndSlowsTheAppsGate() async throws {
        let harness = ChunkHarness { _ in .now(.timeout) }
        #expect(harness.sender.backoffConcurrency == nil)
        let (completion, _) = try await harness.process(harness.chunk(tokens: 3))
        #expect(completion.requeuedTokens == ["t0", "t1", "t2"])
        #expect(completion.requeued.first?.attempt == 2)
        #expect(harness.sender.backoffConcurrency != nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func answers429And503LowerTheGateAndSuccessesDoNot() async throws {
        let ok = ChunkHarness()
        _ = try await ok.process(ok.chunk(tokens: 20))
        #expect(ok.sender.backoffConcurrency == nil)
        #expect(ok.senders.throttles().isEmpty)

        let slowed = ChunkHarness { request in
            request.token.hasSuffix("1") ? .now(.status(503, "ServiceUnavailable")) : .now(.status(429, "TooManyRequests"))
        }
        _ = try await slowed.process(slowed.chunk(tokens: 20))
        let limit = try #require(slowed.sender.backoffConcurrency)
        #expect(limit < 16)
        // The claim reads the app's backoff: it takes little of a slowed app.
        #expect(slowed.senders.throttles()[ChunkHarness.appID]?.backoffConcurrency == limit)
    }

    @Test(.timeLimit(.minutes(1)))
    func unregisteredTokensAreHandedToThePrunerWithAPNsTimestamp() async throws {
        let harness = ChunkHarness { request in
            request.token == "t1" ? .now(.status(410, "Unregistered", timestampMilliseconds: 1_700_000_000_000)) : .now(.ok)
        }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 3))
        #expect(completion.outcome(of: "t1")?.status == 410)
        #expect(completion.outcome(of: "t1")?.reason == "Unregistered")
        #expect(completion.pruneCandidates == [
            PruneCandidate(token: "t1", status: 410, reason: "Unregistered", apnsTimestamp: Date(timeIntervalSince1970: 1_700_000_000)),
        ])
        #expect(completion.requeued.isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func badDeviceTokensAreCountedForTheWrongEnvironmentValve() async throws {
        let harness = ChunkHarness { request in
            request.token == "t0" ? .now(.ok) : .now(.status(400, "BadDeviceToken"))
        }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 4))
        #expect(completion.badDeviceTokens == 3)
        #expect(completion.answered == 4)
        #expect(Set(completion.pruneCandidates.map(\.token)) == ["t1", "t2", "t3"])
        #expect(completion.outcomes.filter { $0.reason == "BadDeviceToken" }.count == 3)
    }

    @Test(.timeLimit(.minutes(1)))
    func configurationErrorsPauseTheAppAfterAFewAnswersAndGiveEveryTokenBack() async throws {
        let harness = ChunkHarness { _ in .now(.status(403, "InvalidProviderToken")) }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 200))
        #expect(harness.appHealth.isPaused(ChunkHarness.appID))
        #expect(harness.appHealth.drainPauses()[.app(ChunkHarness.appID)] != nil)
        // The first window of the gate went out; nothing after the pause did.
        #expect(harness.pool.requests.count <= 16)
        #expect(completion.outcomes.isEmpty)
        #expect(Set(completion.requeuedTokens).count == 200)
        #expect(completion.requeued.allSatisfy { $0.attempt == 1 })
    }

    @Test(.timeLimit(.minutes(1)))
    func jobLevelErrorsFailTheJobAndRecordTheRestUnsent() async throws {
        let harness = ChunkHarness { _ in .now(.status(400, "InvalidPushType")) }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 100))
        #expect(harness.verdicts.failure(of: 1) == "InvalidPushType")
        #expect(harness.verdicts.failuresToWrite() == [1: "InvalidPushType"])
        #expect(!harness.appHealth.isPaused(ChunkHarness.appID))
        let sent = harness.pool.requests.count
        #expect(sent <= 16)
        #expect(completion.outcomes.count == 100)
        #expect(completion.outcomes.filter { $0.status == 400 }.count == sent)
        #expect(completion.outcomes.filter { $0.status == 0 && $0.reason == "InvalidPushType" }.count == 100 - sent)
        #expect(completion.requeued.isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func aCancelMidChunkStopsTheTokensNotYetSent() async throws {
        let verdicts = JobVerdicts()
        let seen = Counter()
        var harness = ChunkHarness { _ in
            if seen.next() == 5 { verdicts.cancel(1) }
            return .now(.ok)
        }
        harness = harness.withVerdicts(verdicts)
        let (completion, freed) = try await harness.process(harness.chunk(tokens: 100))
        let sent = harness.pool.requests.count
        #expect(sent < 100)
        #expect(completion.outcomes.count == sent)
        #expect(completion.outcomes.allSatisfy { $0.status == 200 })
        #expect(completion.requeued.isEmpty)
        #expect(freed == 100)
    }

    @Test(.timeLimit(.minutes(1)))
    func anExpiredJobIsRecordedExpiredWithoutARequest() async throws {
        let harness = ChunkHarness()
        let (completion, _) = try await harness.process(harness.chunk(tokens: 3, expiresAt: harness.clock.now.addingTimeInterval(-1)))
        #expect(harness.pool.requests.isEmpty)
        #expect(completion.outcomes.count == 3)
        #expect(completion.outcomes.allSatisfy { $0.status == 0 && $0.reason == ChunkCompletion.expiredReason })
    }

    @Test(.timeLimit(.minutes(1)))
    func aJobThatExpiresWhileTheChunkWaitsForTheGateRecordsTheRestExpired() async throws {
        let harness = ChunkHarness { _ in .hold }
        let chunk = harness.chunk(tokens: 40, expiresAt: harness.clock.now.addingTimeInterval(60))
        async let result = harness.process(chunk)
        await harness.pool.waitForRequests(16)
        harness.clock.advance(by: .seconds(61))
        #expect(harness.pool.answerHeld(with: .ok) == 16)
        let (completion, _) = try await result
        #expect(harness.pool.requests.count == 16)
        #expect(completion.outcomes.filter { $0.status == 200 }.count == 16)
        #expect(completion.outcomes.filter { $0.reason == ChunkCompletion.expiredReason }.count == 24)
    }

    @Test(.timeLimit(.minutes(1)))
    func answersAfterADelayOnTheTestClockAreRecordedAtTheirTime() async throws {
        let harness = ChunkHarness { _ in .after(.seconds(2), .ok) }
        let start = harness.clock.now
        async let result = harness.process(harness.chunk(tokens: 3))
        await harness.pool.waitForRequests(3)
        harness.clock.advance(by: .seconds(2))
        let (completion, _) = try await result
        #expect(completion.outcomes.count == 3)
        #expect(completion.outcomes.allSatisfy { $0.sentAt == start.addingTimeInterval(2) })
    }

    @Test(.timeLimit(.minutes(1)))
    func aShutdownBeforeTheChunkGivesEveryTokenBackUnsent() async throws {
        let harness = ChunkHarness()
        harness.lifecycle.beginShutdown()
        let (completion, _) = try await harness.process(harness.chunk(tokens: 5, attempt: 3))
        #expect(harness.pool.requests.isEmpty)
        #expect(completion.outcomes.isEmpty)
        #expect(completion.requeuedTokens.sorted() == ["t0", "t1", "t2", "t3", "t4"])
        #expect(completion.requeued.allSatisfy { $0.attempt == 3 && $0.notBefore == harness.clock.now })
    }

    @Test(.timeLimit(.minutes(1)))
    func aShutdownMidChunkRecordsWhatWasAnsweredAndGivesTheRestBack() async throws {
        let harness = ChunkHarness { _ in .hold }
        async let result = harness.process(harness.chunk(tokens: 50))
        await harness.pool.waitForRequests(16)
        harness.lifecycle.beginShutdown()
        harness.pool.answerHeld(with: .ok)
        let (completion, _) = try await result
        #expect(harness.pool.requests.count == 16)
        #expect(completion.outcomes.count == 16)
        #expect(completion.requeuedTokens.count == 34)
        #expect(Set(completion.outcomes.map(\.token)).isDisjoint(with: completion.requeuedTokens))
    }

    @Test(.timeLimit(.minutes(1)))
    func aPausedAppsChunkIsGivenBackUnsent() async throws {
        let harness = ChunkHarness()
        harness.appHealth.sync(pausedInDatabase: [.app(ChunkHarness.appID)])
        let (completion, _) = try await harness.process(harness.chunk(tokens: 4))
        #expect(harness.pool.requests.isEmpty)
        #expect(completion.requeuedTokens.count == 4)
        #expect(completion.outcomes.isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func aChunkOfAnAppWithoutASenderIsGivenBack() async throws {
        let harness = ChunkHarness()
        let (completion, _) = try await harness.process(harness.chunk(tokens: 2, app: "unknown"))
        #expect(completion.requeuedTokens == ["t0", "t1"])
        #expect(completion.outcomes.isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func aPoisonChunkIsRecordedAsFailedWithoutSending() async throws {
        let harness = ChunkHarness()
        let (completion, _) = try await harness.process(harness.chunk(tokens: 3, claims: harness.maximumClaims + 1))
        #expect(harness.pool.requests.isEmpty)
        #expect(completion.outcomes.count == 3)
        #expect(completion.outcomes.allSatisfy { $0.status == 0 && $0.reason == "LeaseExpired" })
    }

    @Test(.timeLimit(.minutes(1)))
    func aChunkOfAFailedJobIsRecordedWithTheJobsReason() async throws {
        let harness = ChunkHarness()
        let (completion, _) = try await harness.process(harness.chunk(tokens: 2, jobFailure: "BadExpirationDate"))
        #expect(harness.pool.requests.isEmpty)
        #expect(completion.outcomes.allSatisfy { $0.status == 0 && $0.reason == "BadExpirationDate" })
    }

    @Test(.timeLimit(.minutes(1)))
    func aChunkOfACancelledJobEndsWithNothingRecorded() async throws {
        let harness = ChunkHarness()
        harness.verdicts.cancel(1)
        let (completion, freed) = try await harness.process(harness.chunk(tokens: 6))
        #expect(harness.pool.requests.isEmpty)
        #expect(completion.outcomes.isEmpty && completion.requeued.isEmpty)
        #expect(completion.readTokens == 6)
        #expect(freed == 6)
    }

    @Test(.timeLimit(.minutes(1)))
    func anExpiredProviderTokenIsRetried() async throws {
        let harness = ChunkHarness { _ in .now(.status(403, "ExpiredProviderToken")) }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 2))
        #expect(completion.outcomes.isEmpty)
        #expect(completion.requeued.first?.attempt == 2)
        #expect(completion.requeued.first?.lastReason == "ExpiredProviderToken")
        #expect(!harness.appHealth.isPaused(ChunkHarness.appID))
    }

    @Test(.timeLimit(.minutes(1)))
    func eachTokenOfAMixedChunkMeetsItsOwnFate() async throws {
        let harness = ChunkHarness { request in
            switch request.token {
            case "t0": .now(.ok)
            case "t1": .now(.status(410, "Unregistered", timestampMilliseconds: 1))
            case "t2": .now(.status(429, "TooManyRequests"))
            case "t3": .now(.status(400, "PayloadTooLarge"))
            default: .now(.timeout)
            }
        }
        let (completion, _) = try await harness.process(harness.chunk(tokens: 5))
        #expect(completion.outcome(of: "t0")?.status == 200)
        #expect(completion.outcome(of: "t1")?.reason == "Unregistered")
        #expect(completion.outcome(of: "t3")?.reason == "PayloadTooLarge")
        #expect(completion.outcome(of: "t2") == nil && completion.outcome(of: "t4") == nil)
        #expect(Set(completion.requeuedTokens) == ["t2", "t4"])
        #expect(completion.pruneCandidates.map(\.token) == ["t1"])
    }
}

extension ChunkHarness {
    /// The harness with the worker's verdicts replaced (an answer closure that cancels the job needs them first).
    func withVerdicts(_ verdicts: JobVerdicts) -> ChunkHarness {
        var copy = self
        copy.verdicts = verdicts
        return copy
    }
}
