import Foundation
import PGPushClient
import PGPushTestSupport
import PostgresNIO
import Testing

/// The client's broadcast controls (migration 0028) as a `pgpush_producer` login: the request's fields reach
/// `push.jobs`, a device's time zone reaches `push.devices`, `push.job_progress`'s new columns come back, and the
/// database's refusals name their field.
@Suite(.database, .timeLimit(.minutes(2)))
struct BroadcastControlsClientTests {
    @Test func theControlsReachTheJobsColumns() async throws {
        try await PGPushClientTests.withProducer { db, push in
            let throttled = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(.init(alert: "New episode")), maxRate: 2000, respectQuietHours: false,
                category: "marketing"))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(throttled) AND max_rate = 2000 AND spread_over IS NULL
                   AND respect_quiet_hours = false AND category = 'marketing' AND paced
                """) == 1)

            let local = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(.init(alert: "Digest")), spreadOver: .seconds(1800),
                localTime: LocalTime(hour: 9, minute: 5)))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(local) AND max_rate IS NULL AND spread_over = interval '30 minutes'
                   AND local_time = '09:05'::time AND respect_quiet_hours AND category IS NULL
                """) == 1)

            // None of them: the columns stay NULL and the job is not paced.
            let plain = try await push.enqueue(EnqueueRequest(app: "news", payload: .apns(.init(alert: "Hi"))))
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(plain) AND max_rate IS NULL AND spread_over IS NULL
                   AND local_time IS NULL AND category IS NULL AND NOT paced
                """) == 1)
        }
    }

    @Test func refusalsNameTheirField() async throws {
        try await PGPushClientTests.withProducer { db, push in
            let both = await #expect(throws: PGPushClientError.self) {
                try await push.enqueue(EnqueueRequest(
                    app: "news", payload: .apns(.init(alert: "x")), maxRate: 10, spreadOver: .seconds(60)))
            }
            #expect(both?.code == .invalidInput && both?.field == "spread_over", "\(String(describing: both))")
            let hour = await #expect(throws: PGPushClientError.self) {
                try await push.enqueue(EnqueueRequest(app: "news", payload: .apns(.init(alert: "x")), localTime: LocalTime(hour: 25)))
            }
            #expect(hour?.code == .invalidInput, "\(String(describing: hour))")
            let zone = await #expect(throws: PGPushClientError.self) {
                try await push.registerDevice(app: "news", token: TestTokens.token(1), timezone: "Europe/Atlantis")
            }
            #expect(zone?.code == .invalidInput && zone?.field == "timezone", "\(String(describing: zone))")
            let left = try await db.scalar("SELECT (SELECT count(*) FROM push.jobs) + (SELECT count(*) FROM push.devices)")
            #expect(left == 0, "a refused call leaves nothing behind")
        }
    }

    @Test func aDevicesZoneIsStoredAndKeptByARegistrationWithoutOne() async throws {
        try await PGPushClientTests.withProducer { db, push in
            try await push.registerDevice(app: "news", token: TestTokens.token(1), timezone: "Europe/Paris")
            try await push.registerDevice(app: "news", token: TestTokens.token(1), userID: "user-1")
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.devices WHERE token = \(TestTokens.token(1)) AND timezone = 'Europe/Paris'
                   AND user_id = 'user-1'
                """) == 1)
        }
    }

    @Test func jobProgressShowsCappedTheThrottleAndTheWaitingZones() async throws {
        try await PGPushClientTests.withProducer { db, push in
            let job = try await push.enqueue(EnqueueRequest(
                app: "news", payload: .apns(.init(alert: "Digest")), localTime: LocalTime(hour: 9), category: "marketing"))
            // What a worker leaves while the job runs: counts, its throttle, two zones' chunks still to come.
            try await db.exec("""
                UPDATE push.jobs SET state = 'running', started_at = now(), total = 10, delivered = 2, capped = 3, throttle = 12.5
                 WHERE id = \(job)
                """)
            try await db.exec("""
                INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, lo_token, estimated_tokens, next_attempt_at, zone)
                VALUES (\(job), 'news', 0, 1, 'range', '', 4, now() + interval '2 hours', 'Europe/Paris'),
                       (\(job), 'news', 0, 2, 'range', '', 1, now() + interval '1 hour', 'Asia/Tokyo')
                """)
            let progress = try #require(try await push.jobProgress(jobID: job))
            #expect(progress.capped == 3)
            #expect(progress.throttle == 12.5)
            #expect(progress.pending == 5)
            #expect(progress.waitingTokens == 5)
            #expect(progress.waitingZones.map(\.zone) == ["Asia/Tokyo", "Europe/Paris"])
            let paris = try #require(progress.waitingZones.last?.moment)
            #expect(progress.estimatedFinishAt.map { abs($0.timeIntervalSince(paris)) < 1 } == true)
        }
    }
}
