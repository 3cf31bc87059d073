import Foundation
import Crypto
import PGPushCore
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// Pruning, pausing, fleet rate limits, the shared provider token and expiry, end to end.
extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct DeliveryPolicyTests {
        @Test func aDeviceReRegisteredAfterItsUnregisteredTimestampSurvives() async throws {
            let unregisteredAt = Int64((Date().timeIntervalSince1970 - 3600) * 1000)  // APNs: invalid since an hour ago
            try await Fleet.with(configure: { $0.registry.unregisteredPrefixTimestampMilliseconds = unregisteredAt }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(50)
                // Both dead; one registered before APNs' timestamp (a day ago), one re-registered since (a minute ago).
                let stale = "dead" + String(repeating: "1", count: 60)
                let fresh = "dead" + String(repeating: "2", count: 60)
                try await fleet.db.exec("""
                    INSERT INTO push.devices (app_id, token, registered_at) VALUES
                    ('app', \(stale), now() - interval '1 day'), ('app', \(fresh), now() - interval '1 minute')
                    """)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker()
                #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "done")
                try await Self.waitUntil(timeout: .seconds(30)) {
                    try await fleet.count("SELECT count(*) FROM push.prune_candidates") == 0
                }
                await worker.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE token = \(stale)") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE token = \(fresh)") == 1)
                #expect(try await fleet.count("""
                    SELECT count(*) FROM push.pruned_devices
                     WHERE token = \(stale) AND reason = 'Unregistered' AND job_id = \(job)
                       AND abs(extract(epoch FROM apns_timestamp) * 1000 - \(unregisteredAt)) < 1
                    """) == 1)
                #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices") == 1)
                #expect(try await fleet.count("SELECT pruned FROM push.job_progress WHERE job_id = \(job)") == 1)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE status = 410") == 2)
            }
        }

        @Test func theWrongEnvironmentPausesTheAppAndPrunesNothing() async throws {
            try await Fleet.with(configure: { $0.registry.badDeviceTokenByDefault = true }) { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(1500)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker()
                _ = try await fleet.waitForJob(job, timeout: .seconds(90))
                try await Self.waitUntil(timeout: .seconds(30)) {
                    try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 1
                }
                try await Task.sleep(for: .seconds(3))  // a few more maintenance passes: still nothing pruned
                await worker.stop()
                #expect(try await fleet.count("SELECT count(*) FROM push.devices") == 1500)
                #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.prune_candidates WHERE suppressed") == 1500, "kept for an operator's decision")
                let reason = try await fleet.db.rows("SELECT paused_reason FROM push.apps WHERE id = 'app'")
                for try await text in reason.decode(String.self) {
                    #expect(text.contains("BadDeviceToken"))
                    #expect(text.contains("wrong APNs environment"))
                }
                #expect(worker.log.contains("safety valve tripped"))
            }
        }

        @Test func aBadTopicPausesTheAppQuicklyAndAResumeFinishesItsJobs() async throws {
            try await Fleet.with(configure: { $0.allowedTopics = ["com.example.app"] }) { fleet in
                try await fleet.createApp(topic: "com.example.wrong")
                try await fleet.registerDevices(5000)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker()
                try await Self.waitUntil(timeout: .seconds(60)) {
                    try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 1
                }
                try await Task.sleep(for: .seconds(2))
                // Paused after a handful of requests: the broadcast was not burnt, and no token was marked failed.
                #expect(fleet.simulator.statistics.requestsTotal < 100)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE state IN ('queued', 'running')") == 1)
                let reason = try await fleet.db.rows("SELECT paused_reason FROM push.apps WHERE id = 'app'")
                for try await text in reason.decode(String.self) {
                    #expect(text == "TopicDisallowed" || text == "BadTopic", "paused with \(text)")
                }

                // The operator fixes the topic and resumes the app.
                try await fleet.db.exec("UPDATE push.apps SET topic = 'com.example.app', paused_reason = NULL, paused_at = NULL WHERE id = 'app'")
                #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done")
                await worker.stop()
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 5000)
                #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE status <> 200") == 0)
            }
        }

        @Test func theFleetRateLimitIsSharedByThreeWorkers() async throws {
            // 300/s keeps this test within what a debug build sustains on two cores next to other tests; the
            // mechanism is the same at any rate (2,000/s is measured with a release build for the closing note).
            let limit = 300
            try await Fleet.with { fleet in
                try await fleet.createApp(rateLimit: limit)
                try await fleet.registerDevices(9_000)
                let job = try await fleet.enqueue()
                let workers = try (0..<3).map { try fleet.startWorker(["--heartbeat-interval", "1", "--chunk-size", "200"], id: "rate-\($0)") }
                _ = try await fleet.waitForJob(job, timeout: .seconds(120))
                for worker in workers { await worker.stop() }
                // The steady middle of the run: from the 5th second after the first send, over 20 seconds.
                let sent = try await fleet.count("""
                    WITH first AS (SELECT min(sent_at) AS t FROM push.deliveries)
                    SELECT count(*) FROM push.deliveries, first
                     WHERE sent_at >= first.t + interval '5 seconds' AND sent_at < first.t + interval '25 seconds'
                    """)
                let rate = Double(sent) / 20
                print("fleet rate limit \(limit)/s, measured \(rate)/s over 20 s with 3 workers")
                #expect(abs(rate - Double(limit)) <= Double(limit) * 0.1, "measured \(rate)/s")
            }
        }

        @Test func fiveWorkersShareOneProviderTokenAcrossARefresh() async throws {
            try await Fleet.with(configure: { $0.providerTokenMinimumRefreshInterval = .seconds(3) }) { fleet in
                try await fleet.createApp(rateLimit: 400)
                try await fleet.registerDevices(4000)
                let job = try await fleet.enqueue()
                let workers = try (0..<5).map { try fleet.startWorker(["--token-refresh-after", "6"], id: "jwt-\($0)") }
                _ = try await fleet.waitForJob(job, timeout: .seconds(120))
                for worker in workers { await worker.stop() }
                let statistics = fleet.simulator.statistics
                let distinct = statistics.distinctProviderTokens.values.reduce(0, +)
                let sendingSeconds = try await fleet.count(
                    "SELECT ceil(extract(epoch FROM max(sent_at) - min(sent_at)))::int8 FROM push.deliveries")
                print("provider tokens seen by the simulator: \(distinct), TooManyProviderTokenUpdates: \(statistics.tooManyProviderTokenUpdatesSent)")
                #expect(statistics.tooManyProviderTokenUpdatesSent == 0)
                // One token per refresh period for the whole fleet; five workers minting their own would show five
                // tokens per period (and TooManyProviderTokenUpdates).
                #expect(distinct >= 2, "the run did not cross a refresh")
                #expect(distinct <= Int(sendingSeconds) / 6 + 2, "\(distinct) tokens in \(sendingSeconds) s")
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 4000)
            }
        }

        /// A wrong key file under the app's key id, since replaced, left its token in push.provider_tokens. APNs
        /// refuses that token, so a worker must mint its own rather than pause the app with InvalidProviderToken.
        @Test func aSharedTokenAnotherKeySignedIsReplacedNotPresented() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(200)
                let stale = try ProviderTokenSigner(
                    teamID: Fleet.teamID, keyID: Fleet.keyID, privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation
                ).sign(issuedAt: Date())
                try await fleet.db.exec("""
                    INSERT INTO push.provider_tokens (team_id, key_id, jwt, issued_at, minted_by)
                    VALUES (\(Fleet.teamID), \(Fleet.keyID), \(stale.jwt), \(stale.issuedAt), 'a-worker-with-the-wrong-file')
                    """)
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker()
                #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "done")
                await worker.stop()
                #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 200)
                #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 0)
                #expect(try await fleet.count("SELECT count(*) FROM push.provider_tokens WHERE jwt = \(stale.jwt)") == 0)
                #expect(fleet.simulator.statistics.distinctProviderTokens.values.reduce(0, +) == 1)
            }
        }

        @Test func aCredentialOutsideTheCredentialsDirectoryPausesTheAppWithoutReadingIt() async throws {
            try await Fleet.with { fleet in
                try await fleet.createApp()
                try await fleet.registerDevices(10)
                let allowed = fleet.directory + "/credentials"
                try FileManager.default.createDirectory(atPath: allowed, withIntermediateDirectories: true)
                // A symlink inside the directory that points outside it is refused too.
                try FileManager.default.createSymbolicLink(atPath: allowed + "/escape.p8", withDestinationPath: fleet.keyPath)
                try await fleet.db.exec("UPDATE push.apps SET private_key_path = 'escape.p8' WHERE id = 'app'")
                let job = try await fleet.enqueue()
                let worker = try fleet.startWorker(["--credentials-dir", allowed])
                try await Self.waitUntil(timeout: .seconds(30)) {
                    try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 1
                }
                await worker.stop()
                let rows = try await fleet.db.rows("SELECT paused_reason FROM push.apps WHERE id = 'app'")
                for try await reason in rows.decode(String.self) {
                    #expect(reason.contains("outside the credentials directory"))
                    #expect(!reason.contains("PRIVATE KEY"))
                }
                #expect(!worker.log.contains("PRIVATE KEY"))
                #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state IN ('queued', 'running')") == 1)
                #expect(fleet.simulator.statistics.requestsTotal == 0)
            }
        }

        static func waitUntil(timeout: Duration, _ condition: () async throws -> Bool) async throws {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if try await condition() { return }
                try await Task.sleep(for: .milliseconds(200))
            }
            Issue.record("condition not met within \(timeout)")
        }
    }
}
