import Testing

@testable import PGPushDispatcher

/// Job verdicts and app health on their own: what stops a job's tokens and what pauses an app.
@Suite struct VerdictStateTests {
    @Test func aJobFailsAfterAHandfulOfJobLevelErrorsAndIsWrittenOnce() {
        var verdicts = JobVerdictState(jobErrorThreshold: 3)
        let result1 = verdicts.recordJobError(7, reason: "InvalidPushType")
        #expect(!result1)
        let result2 = verdicts.recordJobError(7, reason: "InvalidPushType")
        #expect(!result2)
        #expect(verdicts.failure(of: 7) == nil, "two stray answers do not end a job")
        let result3 = verdicts.recordJobError(7, reason: "InvalidPushType")
        #expect(result3)
        #expect(verdicts.failure(of: 7) == "InvalidPushType")
        let result4 = verdicts.recordJobError(7, reason: "InvalidPushType")
        #expect(!result4, "it fails once")
        #expect(verdicts.failuresToWrite == [7: "InvalidPushType"])
        verdicts.written(7)
        #expect(verdicts.failuresToWrite.isEmpty)
        #expect(verdicts.failure(of: 7) != nil, "written, and still stopping its tokens")
    }

    @Test func aJobOfOneRequestFailsAtItsFirstJobLevelError() {
        var verdicts = JobVerdictState(jobErrorThreshold: 3)
        let failed = verdicts.recordJobError(8, reason: "ChannelNotRegistered", immediately: true)
        #expect(failed)
        #expect(verdicts.failure(of: 8) == "ChannelNotRegistered")
        #expect(verdicts.failuresToWrite == [8: "ChannelNotRegistered"])
    }

    @Test func aFailureAnotherWorkerRecordedStopsTokensWithoutBeingWrittenAgain() {
        var verdicts = JobVerdictState()
        verdicts.adoptFailure(9, reason: "TopicDisallowed")
        #expect(verdicts.failure(of: 9) == "TopicDisallowed")
        #expect(verdicts.failuresToWrite.isEmpty)
    }

    @Test func memoryIsBoundedButAnUnwrittenFailureIsNeverForgotten() {
        var verdicts = JobVerdictState(jobErrorThreshold: 1, memory: 10)
        let result5 = verdicts.recordJobError(1, reason: "InvalidPushType")
        #expect(result5)
        for job in Int64(100)..<130 {
            verdicts.adoptFailure(job, reason: "x")
            verdicts.cancel(job)
        }
        #expect(verdicts.failuresToWrite[1] == "InvalidPushType")
        #expect(verdicts.failure(of: 1) == "InvalidPushType")
        #expect(verdicts.isCancelled(129))
        #expect(!verdicts.isCancelled(100), "old cancels were forgotten: the claim and completion still see them")
    }

    @Test func anAppIsPausedAfterTheThresholdOfErrorsInARowPerProvider() {
        var health = AppHealthState(threshold: 3)
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        health.recordSuccess("a", provider: "fcm")
        #expect(!health.isPaused("a"))
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        #expect(health.isPaused("a"), "FCM's successes do not hide APNs refusing the credential")
        let result6 = health.drainPauses()
        #expect(result6 == [.app("a"): "BadTopic"])
        let result7 = health.drainPauses()
        #expect(result7.isEmpty, "each pause is handed out once")
    }

    @Test func aSuccessBetweenErrorsResetsTheCount() {
        var health = AppHealthState(threshold: 2)
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        health.recordSuccess("a", provider: "apns")
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        #expect(!health.isPaused("a"))
    }

    @Test func aPauseBeingWrittenSurvivesASyncAndAResumeInTheDatabaseEndsIt() {
        var health = AppHealthState(threshold: 1)
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        _ = health.drainPauses()
        health.sync(pausedInDatabase: [])
        #expect(health.isPaused("a"), "the write may not have landed yet")
        health.sync(pausedInDatabase: [.app("a")])
        health.sync(pausedInDatabase: [])
        #expect(!health.isPaused("a"), "an operator resumed it")
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        #expect(health.isPaused("a"), "the count started over")
    }

    @Test func aFailedPauseWriteIsHandedOutAgain() {
        var health = AppHealthState(threshold: 1)
        health.recordConfigurationError("a", provider: "apns", reason: "BadTopic")
        let first = health.drainPauses()
        health.retryPause(.app("a"), reason: first[.app("a")]!)
        health.sync(pausedInDatabase: [])
        #expect(health.isPaused("a"))
        let result8 = health.drainPauses()
        #expect(result8 == [.app("a"): "BadTopic"])
    }

    @Test func aPushServicesJobErrorFailsOnlyTheJobsWebPart() {
        var verdicts = JobVerdictState(jobErrorThreshold: 2)
        let first = verdicts.recordWebJobError(7, reason: "PayloadTooLarge")
        #expect(!first)
        #expect(verdicts.failure(of: 7, platform: .web) == nil, "one answer is not yet the job's")
        let second = verdicts.recordWebJobError(7, reason: "PayloadTooLarge")
        #expect(second)
        #expect(verdicts.failure(of: 7, platform: .web) == "PayloadTooLarge")
        #expect(verdicts.failure(of: 7, platform: .ios) == nil)
        #expect(verdicts.failure(of: 7, platform: .android) == nil)
        #expect(verdicts.failure(of: 7) == nil)
        #expect(verdicts.failuresToWrite.isEmpty, "the job itself goes on: nothing is written to push.jobs")
    }

    @Test func webPushErrorsPauseOnlyTheAppsWebPush() {
        var health = AppHealthState(threshold: 2)
        health.recordConfigurationError("a", provider: "webpush", reason: "Web Push: 403 BadJwtToken")
        health.recordConfigurationError("a", provider: "webpush", reason: "Web Push: 403 BadJwtToken")
        #expect(!health.isPaused("a"), "its APNs and FCM keep sending")
        #expect(!health.isPaused("a", platform: .ios))
        #expect(!health.isPaused("a", platform: .android))
        #expect(health.isPaused("a", platform: .web))
        #expect(health.drainPauses() == [.webPush("a"): "Web Push: 403 BadJwtToken"])
        // `pgpush apps resume` clears the column: the pause ends and the count starts over.
        health.sync(pausedInDatabase: [.webPush("a")])
        health.sync(pausedInDatabase: [])
        #expect(!health.isPaused("a", platform: .web))
        health.recordConfigurationError("a", provider: "webpush", reason: "again")
        #expect(!health.isPaused("a", platform: .web), "one error after a resume is below the threshold")
    }

    @Test func aWholeAppPauseStopsItsWebPushToo() {
        var health = AppHealthState(threshold: 1)
        health.sync(pausedInDatabase: [.app("a")])
        #expect(health.isPaused("a", platform: .web))
        #expect(health.isPaused("a", platform: .ios))
    }

    @Test func anAppPausedInTheDatabaseByAnOperatorIsPausedHere() {
        var health = AppHealthState(threshold: 3)
        health.sync(pausedInDatabase: [.app("b")])
        #expect(health.isPaused("b"))
        let result9 = health.drainPauses()
        #expect(result9.isEmpty, "not this worker's pause to write")
    }
}
