import Foundation
import PGPushCore
@testable import PGPushDispatcher
import PGPushDispatcherTesting
import PGPushStore
import Testing

/// The worker as a whole on fakes: claiming under leases, sending, writing, retries falling due on the clock,
/// verdicts written back, and the shutdown.
@Suite struct WorkerTests {
    @Test(.timeLimit(.minutes(1)))
    func aJobIsSentToEveryTokenAndEnds() async throws {
        let harness = WorkerHarness()
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: (0..<250).map { "d\($0)" }, chunkSize: 100)
        try await harness.run { _, _ in
            await harness.store.waitUntil { $0.jobs[job]?.state == .done }
        }
        let contents = harness.store.contents
        #expect(contents.deliveries(of: job).count == 250)
        #expect(Set(contents.deliveries(of: job).map(\.token)).count == 250)
        #expect(contents.deliveries(of: job).allSatisfy { $0.status == 200 && $0.attempt == 1 })
        #expect(Set(harness.pool.tokens) == Set((0..<250).map { "d\($0)" }))
        #expect(harness.pool.requests.count == 250)
        #expect(contents.registered && contents.unregistered)
    }

    @Test(.timeLimit(.minutes(1)))
    func oneTokenJobsTakeTheFastLaneAndShareTheirSender() async throws {
        let harness = WorkerHarness()
        let jobs = (0..<100).map { harness.store.enqueue(app: WorkerHarness.appID, tokens: ["u\($0)"]) }
        try await harness.run { _, _ in
            await harness.store.waitUntil { contents in jobs.allSatisfy { contents.jobs[$0]?.state == .done } }
        }
        #expect(harness.store.contents.deliveries.count == 100)
        // Batches of one-token chunks check the app's sender out once, not once per job.
        #expect(harness.senders.checkOuts < 100)
    }

    @Test(.timeLimit(.minutes(1)))
    func aRetryIsClaimedOnlyOnceItsTimeHasComeOnTheClock() async throws {
        let seen = Counter()
        let harness = WorkerHarness { _ in seen.next() == 1 ? .now(.status(503, "ServiceUnavailable")) : .now(.ok) }
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: ["a", "b"])
        let start = harness.clock.now
        try await harness.run { _, _ in
            await harness.store.waitUntil { $0.chunks.values.contains { $0.attempt == 2 && $0.lockedBy == nil } }
            let retry = try #require(harness.store.contents.chunks(of: job).first)
            #expect(retry.notBefore == start.addingTimeInterval(5))
            #expect(retry.lastReason == "ServiceUnavailable")
            // Not due until the clock moves: the worker keeps polling and leaves it.
            await harness.store.waitUntil { $0.claimBudgets.count >= 5 }
            #expect(harness.pool.requests.count == 2)
            harness.clock.advance(by: .seconds(5))
            await harness.store.waitUntil { $0.jobs[job]?.state == .done }
        }
        let deliveries = harness.store.contents.deliveries(of: job)
        #expect(deliveries.count == 2)
        let retried = try #require(deliveries.first { $0.attempt == 2 })
        #expect(retried.status == 200)
        #expect(harness.pool.requests.count == 3)
    }

    @Test(.timeLimit(.minutes(1)))
    func aCompletionAfterTheLeaseWasLostIsNotWritten() async throws {
        let harness = WorkerHarness { _ in .hold }
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: ["a", "b", "c"])
        try await harness.run { _, _ in
            await harness.pool.waitForRequests(3)
            let chunk = try #require(harness.store.contents.chunks(of: job).first)
            harness.store.rescue(chunk.id)
            harness.pool.answerHeld(with: .ok)
            await harness.store.waitUntil { $0.leaseLost.contains(chunk.id) }
            #expect(harness.store.contents.chunks[chunk.id]?.lockedBy == "other-worker:2")
        }
        #expect(harness.store.contents.deliveries(of: job).isEmpty)
    }

    @Test(.timeLimit(.minutes(1)))
    func aPausedAppsWorkStaysQueuedWhileOtherAppsSend() async throws {
        let harness = WorkerHarness(maintenanceInterval: .seconds(3600))
        let pausedPool = harness.addApp(AppRecord(id: "paused", topic: "com.example.paused", environment: "production",
                                                  pausedReason: "BadTopic"))
        let held = harness.store.enqueue(app: "paused", tokens: ["p1", "p2"])
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: ["a", "b"])
        try await harness.run { _, _ in
            await harness.store.waitUntil { $0.jobs[job]?.state == .done }
        }
        #expect(pausedPool.requests.isEmpty)
        let chunks = harness.store.contents.chunks(of: held)
        #expect(chunks.count == 1 && chunks[0].claims == 0 && chunks[0].lockedBy == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func configurationErrorsPauseTheAppInTheStoreAndKeepItsTokens() async throws {
        let harness = WorkerHarness { _ in .now(.status(403, "InvalidProviderToken")) }
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: (0..<50).map { "d\($0)" })
        try await harness.run { _, _ in
            await harness.store.waitUntil { contents in
                contents.apps[WorkerHarness.appID]?.pausedReason != nil
                    && contents.chunks(of: job).allSatisfy { $0.lockedBy == nil }
                    && contents.chunks(of: job).reduce(0) { $0 + $1.tokens.count } == 50
            }
        }
        let contents = harness.store.contents
        #expect(contents.apps[WorkerHarness.appID]?.pausedReason?.contains("InvalidProviderToken") == true)
        #expect(contents.deliveries(of: job).isEmpty)
        #expect(contents.chunks(of: job).allSatisfy { $0.attempt == 1 })
        #expect(harness.pool.requests.count <= 16)
    }

    @Test(.timeLimit(.minutes(1)))
    func jobLevelErrorsFailTheJobButNotTheApp() async throws {
        let harness = WorkerHarness(maintenanceInterval: .seconds(3600)) { request in
            request.headers["apns-push-type"] == "voip" ? .now(.status(400, "InvalidPushType")) : .now(.ok)
        }
        let failing = harness.store.enqueue(app: WorkerHarness.appID, tokens: (0..<60).map { "v\($0)" }, pushType: "voip")
        let fine = harness.store.enqueue(app: WorkerHarness.appID, tokens: ["a", "b"])
        try await harness.run { _, _ in
            await harness.store.waitUntil { contents in
                contents.jobs[failing]?.state == .done && contents.jobs[failing]?.failureReason != nil
                    && contents.jobs[fine]?.state == .done
            }
        }
        let contents = harness.store.contents
        #expect(contents.jobs[failing]?.failureReason == "InvalidPushType")
        #expect(contents.deliveries(of: failing).count == 60)
        #expect(contents.deliveries(of: failing).allSatisfy { $0.reason == "InvalidPushType" })
        #expect(contents.deliveries(of: fine).allSatisfy { $0.status == 200 })
        #expect(contents.apps[WorkerHarness.appID]?.pausedReason == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func aShutdownWithinTheGracePeriodWritesWhatWasAnsweredAndGivesTheRestBack() async throws {
        let harness = WorkerHarness { _ in .hold }
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: (0..<100).map { "d\($0)" })
        try await harness.run { worker, trigger in
            await harness.pool.waitForRequests(16)
            trigger.triggerGracefulShutdown()
            await worker.sendingStopped()
            harness.pool.answerHeld(with: .ok)
        }
        let contents = harness.store.contents
        #expect(contents.deliveries(of: job).count == 16)
        let rest = contents.chunks(of: job)
        #expect(rest.reduce(0) { $0 + $1.tokens.count } == 84)
        #expect(rest.allSatisfy { $0.lockedBy == nil && $0.attempt == 1 })
        #expect(harness.pool.requests.count == 16)
        #expect(contents.unregistered)
    }

    @Test(.timeLimit(.minutes(1)))
    func aClaimAnsweredAfterTheShutdownStartedGivesItsChunksBack() async throws {
        let harness = WorkerHarness()
        harness.store.claimAnswers.hold()
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: (0..<100).map { "d\($0)" })
        try await harness.run { worker, trigger in
            // The claim has taken the chunks in the store; its answer is still on its way when the shutdown starts.
            await harness.store.claimAnswers.waitForHeldClaim()
            trigger.triggerGracefulShutdown()
            await worker.sendingStopped()
            // The one wait for time here: the answer must come after the shutdown had its chance to cancel the
            // claim (which, if it did, would leave the chunks locked), and well inside the claim's allowance.
            try await Task.sleep(for: .milliseconds(300))
            harness.store.claimAnswers.answer()
        }
        let contents = harness.store.contents
        #expect(harness.pool.requests.isEmpty)
        #expect(contents.deliveries(of: job).isEmpty)
        let chunks = contents.chunks(of: job)
        #expect(chunks.reduce(0) { $0 + $1.tokens.count } == 100)
        #expect(chunks.allSatisfy { $0.lockedBy == nil }, "the chunks the claim took are given back, not left to their lease")
        #expect(contents.unregistered)
    }

    @Test(.timeLimit(.minutes(1)))
    func theHeartbeatRenewsTheLeasesOfTheChunksItHolds() async throws {
        let harness = WorkerHarness(lease: .seconds(30)) { _ in .hold }
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: ["a", "b"])
        try await harness.run { _, _ in
            await harness.pool.waitForRequests(2)
            let chunk = try #require(harness.store.contents.chunks(of: job).first)
            harness.clock.advance(by: .seconds(20))
            let renewed = harness.clock.now.addingTimeInterval(30)
            await harness.store.waitUntil { $0.chunks[chunk.id]?.lockedUntil == renewed }
            harness.pool.answerHeld(with: .ok)
            await harness.store.waitUntil { $0.jobs[job]?.state == .done }
        }
        #expect(harness.store.contents.deliveries(of: job).count == 2)
    }

    @Test(.timeLimit(.minutes(1)))
    func aRateLimitedAppIsClaimedAFewSecondsOfSendingAtATime() async throws {
        let app = AppRecord(id: WorkerHarness.appID, topic: "com.example.app", environment: "production", rateLimit: 10)
        let harness = WorkerHarness(app: app)
        harness.store.enqueue(app: WorkerHarness.appID, tokens: (0..<1000).map { "d\($0)" }, chunkSize: 10)
        try await harness.run { _, _ in
            await harness.store.waitUntil { $0.claimBudgets.contains { $0.appAllowances[WorkerHarness.appID] != nil } }
        }
        let budget = try #require(harness.store.contents.claimBudgets.first { $0.appAllowances[WorkerHarness.appID] != nil })
        let allowance = try #require(budget.appAllowances[WorkerHarness.appID])
        #expect(allowance > 0 && allowance < 100)
        #expect(budget.room > allowance)
        // What it sent stays within a few seconds of its rate (10/s), not the worker's room.
        #expect(harness.pool.requests.count < 100)
    }

    @Test(.timeLimit(.minutes(1)))
    func deadTokensReachThePruneCandidatesWithTheirDelivery() async throws {
        let harness = WorkerHarness { request in
            request.token == "gone" ? .now(.status(410, "Unregistered", timestampMilliseconds: 1_700_000_000_000)) : .now(.ok)
        }
        let job = harness.store.enqueue(app: WorkerHarness.appID, tokens: ["a", "gone", "b"])
        try await harness.run { _, _ in
            await harness.store.waitUntil { $0.jobs[job]?.state == .done }
        }
        let contents = harness.store.contents
        #expect(contents.pruneCandidates.map(\.token) == ["gone"])
        #expect(contents.pruneCandidates.first?.apnsTimestamp == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(contents.deliveries(of: job).first { $0.token == "gone" }?.reason == "Unregistered")
    }

    @Test(.timeLimit(.minutes(1)))
    func a429SlowsTheAppsClaimsUntilItRecovers() async throws {
        let seen = Counter()
        let harness = WorkerHarness { _ in seen.next() <= 16 ? .now(.status(429, "TooManyRequests")) : .now(.ok) }
        harness.store.enqueue(app: WorkerHarness.appID, tokens: (0..<40).map { "d\($0)" }, chunkSize: 40)
        try await harness.run { _, _ in
            await harness.store.waitUntil { $0.claimBudgets.contains { $0.appAllowances[WorkerHarness.appID] != nil } }
        }
        let allowance = try #require(harness.store.contents.claimBudgets.compactMap { $0.appAllowances[WorkerHarness.appID] }.first)
        let backoff = try #require(harness.senders.sender(of: WorkerHarness.appID)?.backoffConcurrency)
        #expect(allowance <= 2 * backoff)
    }
}
