import Foundation
import Logging
import PGPushClient
import PGPushTestSupport
import PostgresNIO
import Testing

/// The Swift client against the real schema, as a `pgpush_producer` login: the README's example (enqueue a
/// broadcast, follow its events to job_done, read its progress) with a worker's finishing UPDATEs standing in for
/// a worker, every call of the SQL API, the caller's transaction, and the database's errors with their field.
@Suite(.database, .timeLimit(.minutes(2)))
struct PGPushClientTests {
    static let fcmToken = "fYK3abcdEFGH:APA91bHqwe-_rty0123456789"

    /// A fresh database with the app "news" (APNs, and FCM too when `fcm`), and `body` run with a client of a
    /// login that is a member of `pgpush_producer` only.
    static func withProducer(
        fcm: Bool = false, _ body: @Sendable (TestDatabase, PGPushClient) async throws -> Void
    ) async throws {
        try await TestDatabase.with { db in
            try await db.createApp("news", topic: "com.example.news")
            if fcm {
                try await db.exec("""
                    UPDATE push.apps SET fcm_project_id = 'news-app-7f3a', fcm_service_account_path = 'news/sa.json'
                     WHERE id = 'news'
                    """)
            }
            let login = try await db.createLogin(memberOf: "pgpush_producer")
            try await withTestClient(db.urlString(user: login), maximumConnections: 4, logger: db.logger) { postgres in
                try await body(db, PGPushClient(postgres, logger: db.logger))
            }
        }
    }

    /// What a worker does to a job, in its own committed statements: takes it, then finishes it with its counts.
    static func finishAsAWorker(_ db: TestDatabase, job: Int64, total: Int64, delivered: Int64, failed: Int64) async throws {
        try await db.exec("""
            UPDATE push.jobs SET state = 'running', started_at = now(), audience_at = now(), total = \(total), android_total = 0
             WHERE id = \(job)
            """)
        try await db.exec("""
            UPDATE push.jobs SET state = 'done', delivered = \(delivered), failed = \(failed), answered = \(total),
                   first_sent_at = now(), finished_at = now()
             WHERE id = \(job)
            """)
    }

    /// Reads `events` until a job's last event.
    static func follow(_ events: JobEvents) async throws -> [JobEvent] {
        var seen: [JobEvent] = []
        for try await event in events {
            seen.append(event)
            if event.kind.endsJob { break }
        }
        return seen
    }

    // MARK: The README's example

    @Test func theReadmeExampleFollowsABroadcastToJobDone() async throws {
        try await Self.withProducer { db, push in
            for index in 0..<3 {
                try await push.registerDevice(app: "news", token: TestTokens.token(index), userID: "user-\(index)",
                                              tags: ["sports"])
            }

            // The README's code, as written there (the events' poll is shorter, for a quick test).
            let from = try await push.latestEventID()
            let job = try await push.enqueue(EnqueueRequest(
                app: "news",
                payload: .apns(APNsPayload(alert: .init(title: "Goal!", body: "2-1 in the 89th"), sound: .default,
                                           custom: ["match": "77"])),
                collapseID: "match-77",
                labels: ["campaign": "match-77"]))

            async let followed = Self.follow(push.events(after: from, jobID: job, pollInterval: .milliseconds(50)))
            try await Self.finishAsAWorker(db, job: job, total: 3, delivered: 2, failed: 1)
            let events = try await followed

            #expect(events.map(\.kind) == [.jobStarted, .jobDone])
            #expect(events.allSatisfy { $0.jobID == job && $0.app == "news" && $0.id > from })
            #expect(events.last?.body["delivered"] == 2)
            #expect(events.last?.body["failed"] == 1)
            #expect(events.last?.body["state"] == "done")

            let progress = try #require(try await push.jobProgress(jobID: job))
            #expect(progress.state == .done && progress.state.hasEnded)
            #expect(progress.total == 3 && progress.delivered == 2 && progress.failed == 1 && progress.pending == 0)
            #expect(progress.iosTotal == 3 && progress.iosDelivered == 2)
            #expect(progress.labels == ["campaign": "match-77"])
            #expect(progress.app == "news" && progress.finishedAt != nil && progress.priority == 0)

            let stored = try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE id = \(job) AND push_type = 'alert' AND collapse_id = 'match-77'
                   AND payload = '{"aps":{"alert":{"title":"Goal!","body":"2-1 in the 89th"},"sound":"default"},"match":"77"}'
                """)
            #expect(stored == 1)
        }
    }

    @Test func aListenerWakesTheSequenceBeforeItsPoll() async throws {
        try await Self.withProducer { db, push in
            try await push.registerDevice(app: "news", token: TestTokens.token(1))
            let listener = try await db.connect(as: db.url.username)
            let job = try await push.enqueue(EnqueueRequest(app: "news", payload: .apns(APNsPayload(alert: "hi"))))
            // A poll of a minute: only the NOTIFY can bring the events within the test's wait.
            let events = push.events(after: 0, jobID: job, listener: listener, pollInterval: .seconds(60))
            let started = ContinuousClock.now
            async let followed = Self.follow(events)
            try await Task.sleep(for: .milliseconds(300))  // the sequence has read everything and waits
            try await Self.finishAsAWorker(db, job: job, total: 1, delivered: 1, failed: 0)
            #expect(try await followed.map(\.kind) == [.jobStarted, .jobDone])
            #expect(ContinuousClock.now - started < .seconds(20))
            try await listener.close()
        }
    }

    @Test func theSequenceEndsWhenItsTaskIsCancelledAndResumesByID() async throws {
        try await Self.withProducer { db, push in
            try await push.registerDevice(app: "news", token: TestTokens.token(1))
            let first = try await push.enqueue(EnqueueRequest(app: "news", payload: .apns(APNsPayload(alert: "one"))))
            let second = try await push.enqueue(EnqueueRequest(app: "news", payload: .apns(APNsPayload(alert: "two"))))
            try await Self.finishAsAWorker(db, job: first, total: 1, delivered: 1, failed: 0)
            try await Self.finishAsAWorker(db, job: second, total: 1, delivered: 0, failed: 1)

            // Every app's events, two rows a read: paging goes on without waiting while there is more.
            var all: [JobEvent] = []
            for try await event in push.events(after: 0, pollInterval: .seconds(60), batchSize: 2) {
                all.append(event)
                if all.count == 4 { break }
            }
            #expect(all.map(\.jobID) == [first, first, second, second])
            #expect(all.map(\.id) == all.map(\.id).sorted())

            // Resuming after the first job's end gives the second job's events only.
            var resumed: [JobEvent] = []
            for try await event in push.events(after: all[1].id, app: "news", pollInterval: .milliseconds(20)) {
                resumed.append(event)
                if event.kind.endsJob { break }
            }
            #expect(resumed.map(\.kind) == [.jobStarted, .jobDone])
            #expect(resumed.allSatisfy { $0.jobID == second })

            // Nothing more comes: the sequence waits until its task is cancelled, and then simply ends.
            let waiting = Task {
                var count = 0
                for try await _ in push.events(after: all[3].id, pollInterval: .milliseconds(20)) { count += 1 }
                return count
            }
            try await Task.sleep(for: .milliseconds(200))
            waiting.cancel()
            #expect(try await waiting.value == 0)
        }
    }

    // MARK: The rest of the SQL API

    @Test func everyCallOfTheSQLAPI() async throws {
        try await Self.withProducer(fcm: true) { db, push in
            let ios = TestTokens.token(7)
            try await push.registerDevice(app: "news", token: ios, userID: "user-43", tags: ["sports"], locale: "fr-CA")
            try await push.registerDevice(app: "news", token: Self.fcmToken, platform: .android, userID: "user-43")
            try await push.registerDevice(app: "news", token: TestTokens.token(8), userID: "user-43",
                                          kind: .activity(id: "match-77"))
            try await push.registerDevice(app: "news", token: TestTokens.token(9), userID: "user-43",
                                          kind: .activityStart(type: "MatchAttributes"))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices
                 WHERE (token = \(ios) AND locale = 'fr-ca' AND tags = '{sports}' AND platform = 'ios')
                    OR (token = \(Self.fcmToken) AND platform = 'android')
                    OR (token_kind = 'activity' AND activity_id = 'match-77')
                    OR (token_kind = 'activity_start' AND activity_type = 'MatchAttributes')
                """) == 4)

            // Both platforms, an explicit Android message, locale variants and each device's badge counter.
            let job = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(APNsPayload(alert: .init(title: "Goal!", body: "2-1"), sound: .default)),
                audience: .userIDs(["user-43"]), priority: 10, expiresAt: Date().addingTimeInterval(3600),
                idempotencyKey: "goal-2-1",
                fcm: FCMMessage(notification: .init(title: "Goal!", body: "2-1"), data: ["match": "77"],
                                android: .init(priority: .high, ttl: .seconds(600), collapseKey: "match-77")),
                localized: ["fr": LocalizedVariant(APNsPayload(alert: .init(title: "But !")),
                                                   fcm: FCMMessage(notification: .init(title: "But !")))],
                badge: .increment, labels: ["campaign": "cup"]))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE id = \(job) AND priority = 10 AND badge = 'increment' AND user_ids = '{user-43}'
                   AND fcm = '{"notification":{"title":"Goal!","body":"2-1"},"data":{"match":"77"},
                               "android":{"priority":"HIGH","ttl":"600s","collapse_key":"match-77"}}'
                   AND variants -> 'fr' -> 'apns' -> 'aps' -> 'alert' ->> 'title' = 'But !'
                   AND variants -> 'fr' -> 'fcm' -> 'notification' ->> 'title' = 'But !'
                   AND variants -> 'fr' -> 'apns' -> 'aps' -> 'alert' ->> 'body' = '2-1'
                """) == 1)
            // The same idempotency key is the same job.
            #expect(try await push.enqueue(EnqueueRequest(app: "news", payload: .apns(APNsPayload(alert: "x")),
                                                          idempotencyKey: "goal-2-1")) == job)

            // Live Activities: an update by activity id, a start on push-to-start tokens.
            let update = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .liveActivity(.update(contentState: ["score": "2-1"])),
                apnsPriority: 5, audience: .activityIDs(["match-77"])))
            let start = try await push.enqueue(EnqueueRequest(
                app: "news",
                payload: .liveActivity(.start(attributesType: "MatchAttributes", attributes: ["match": "77"],
                                              contentState: ["score": "0-0"], alert: .init(title: "Kick-off"))),
                audience: .userIDs(["user-43"]), activityType: "MatchAttributes"))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs
                 WHERE (id = \(update) AND push_type = 'liveactivity' AND apns_priority = 5 AND activity_ids = '{match-77}')
                    OR (id = \(start) AND push_type = 'liveactivity' AND audience_kind = 'activity_start')
                """) == 2)

            // A silent push, scheduled: cancelled before it is sent; cancelling again changes nothing.
            let silent = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(APNsPayload(contentAvailable: true, custom: ["refresh": "scores"])),
                pushType: .background, audience: .tags(["sports"]), sendAt: Date().addingTimeInterval(600)))
            #expect(try await push.cancel(jobID: silent))
            #expect(try await !push.cancel(jobID: silent))
            #expect(try await push.jobProgress(jobID: silent)?.state == .cancelled)
            #expect(try await push.jobProgress(jobID: 999_999) == nil)

            // A newer job with the same replace key replaces a pending one.
            let older = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(APNsPayload(alert: "3 unread")), audience: .userIDs(["user-43"]),
                replaceKey: "inbox-43"))
            let newer = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(APNsPayload(alert: "4 unread")), audience: .userIDs(["user-43"]),
                replaceKey: "inbox-43"))
            let replaced = try #require(try await push.jobProgress(jobID: older))
            #expect(replaced.state == .cancelled && replaced.replacedBy == newer && replaced.replaceKey == "inbox-43")
            var ends: [JobEvent] = []
            for try await event in push.events(jobID: older, pollInterval: .milliseconds(20)) where event.kind.endsJob {
                ends.append(event)
                break
            }
            #expect(ends.first?.kind == .jobReplaced && ends.first?.body["replaced_by"]?.intValue == newer)

            // Badges and opens.
            #expect(try await push.setBadge(app: "news", of: .user("user-43"), to: 0) == 4)
            #expect(try await push.setBadge(app: "news", of: .token(ios), to: 5) == 1)
            #expect(try await push.recordOpen(app: "news", token: ios, of: .job(job)))
            #expect(try await !push.recordOpen(app: "news", token: ios, of: .job(job)))

            // A failure worth retrying is resent to its token, as a new job.
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at)
                VALUES (\(job), 'news', \(ios), 503, 'ServiceUnavailable', gen_random_uuid(), 5, now())
                """)
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 1, failed = 1, finished_at = now() WHERE id = \(job)")
            let resent = try #require(try await push.resendFailed(jobID: job))
            let resentJob = try #require(try await push.jobProgress(jobID: resent))
            #expect(resentJob.resentFrom == job && resentJob.labels == ["campaign": "cup"])
            #expect(try await push.resendFailed(jobID: job) == nil)
        }
    }

    @Test func callsRunInTheCallersTransaction() async throws {
        try await Self.withProducer { db, push in
            struct OrderFailed: Error {}
            let request = EnqueueRequest(app: "news", payload: .apns(APNsPayload(alert: "Your order shipped")),
                                         audience: .tokens([TestTokens.token(3)]))
            do {
                try await push.postgres.withTransaction(logger: db.logger) { connection in
                    try await push.registerDevice(app: "news", token: TestTokens.token(3), on: connection)
                    _ = try await push.enqueue(request, on: connection)
                    throw OrderFailed()
                }
                Issue.record("the transaction did not fail")
            } catch let error as PostgresTransactionError {
                #expect(error.closureError is OrderFailed)
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 0)

            let job = try await push.postgres.withTransaction(logger: db.logger) { connection in
                try await push.registerDevice(app: "news", token: TestTokens.token(3), on: connection)
                return try await push.enqueue(request, on: connection)
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(job)") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 1)
        }
    }

    // MARK: Errors

    @Test func aBadTokenIsRefusedWithItsField() async throws {
        try await Self.withProducer { db, push in
            let refusal = await #expect(throws: PGPushClientError.self) {
                try await push.enqueue(EnqueueRequest(app: "news", payload: .apns(APNsPayload(alert: "hi")),
                                                      audience: .tokens(["not-a-token"])))
            }
            #expect(refusal?.code == .invalidInput)
            #expect(refusal?.field == "tokens")
            #expect(refusal?.sqlState == "23514")
            #expect(refusal?.message.contains("invalid device token") == true)
            let jobs = try await db.scalar("SELECT count(*) FROM push.jobs")
            #expect(jobs == 0)
        }
    }

    @Test func unknownThingsAndMissingGrantsHaveTheirCodes() async throws {
        try await Self.withProducer { db, push in
            let unknownApp = await #expect(throws: PGPushClientError.self) {
                try await push.enqueue(EnqueueRequest(app: "nope", payload: .apns(APNsPayload(alert: "hi"))))
            }
            #expect(unknownApp?.code == .unknown && unknownApp?.field == "app_id" && unknownApp?.sqlState == "23503")

            let unknownJob = await #expect(throws: PGPushClientError.self) { try await push.cancel(jobID: 424_242) }
            #expect(unknownJob?.code == .unknown && unknownJob?.field == "job_id" && unknownJob?.sqlState == "P0002")

            let badge = await #expect(throws: PGPushClientError.self) {
                try await push.setBadge(app: "news", of: .token(TestTokens.token(1)), to: -1)
            }
            #expect(badge?.code == .invalidInput && badge?.field == "value")

            let payload = await #expect(throws: PGPushClientError.self) {
                try await push.enqueue(EnqueueRequest(app: "news", payload: .liveActivity(.update(contentState: [:])),
                                                      apnsPriority: 1, audience: .activityIDs(["match-77"])))
            }
            #expect(payload?.code == .invalidInput && payload?.field == "apns_priority")

            // A login granted another app only.
            try await db.createApp("shop", topic: "com.example.shop")
            let login = try await db.createLogin(memberOf: "pgpush_producer")
            try await db.exec("SELECT push.grant_app(\(login), 'shop')")
            try await withTestClient(db.urlString(user: login), logger: db.logger) { postgres in
                let shop = PGPushClient(postgres, logger: db.logger)
                let denied = await #expect(throws: PGPushClientError.self) {
                    try await shop.registerDevice(app: "news", token: TestTokens.token(1))
                }
                #expect(denied?.code == .permissionDenied && denied?.field == "app_id" && denied?.sqlState == "42501")
            }
        }
    }
}
