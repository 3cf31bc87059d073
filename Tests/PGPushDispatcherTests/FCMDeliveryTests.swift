import CryptoExtras
import Foundation
import Logging
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// The FCM side of a fleet: the FCM simulator in-process over TLS HTTP/2, a service account it trusts (the
/// file the workers read), and an app with APNs and FCM credentials.
struct AndroidSide: Sendable {
    let simulator: FCMSimulator
    let accountPath: String
    static let projectID = "pgpush-test-7f3a"
    static let clientEmail = "pgpush@pgpush-test-7f3a.iam.gserviceaccount.com"

    static func with(
        _ fleet: Fleet,
        configure: @Sendable (inout FCMSimulatorConfiguration) -> Void = { _ in },
        _ body: @Sendable (AndroidSide) async throws -> Void
    ) async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        var configuration = FCMSimulatorConfiguration()
        // The same directory as the APNs simulator: one CA, which the workers trust for both.
        configuration.certificateDirectory = fleet.directory + "/simulator"
        configuration.serviceAccounts = [FCMSimulatorServiceAccount(
            clientEmail: clientEmail, projectID: projectID, publicKey: key.publicKey, privateKeyID: "key-1")]
        configure(&configuration)
        var logger = Logger(label: "pgpush.test.fcm-simulator")
        logger.logLevel = .warning
        let simulator = FCMSimulator(configuration: configuration, logger: logger)
        let port = try await simulator.start()
        let account: [String: String] = [
            "type": "service_account", "project_id": projectID, "private_key_id": "key-1",
            "private_key": key.pkcs8PEMRepresentation, "client_email": clientEmail,
            "token_uri": "https://localhost:\(port)/token",
        ]
        let accountPath = fleet.directory + "/firebase-sa.json"
        try JSONSerialization.data(withJSONObject: account).write(to: URL(fileURLWithPath: accountPath))
        let side = AndroidSide(simulator: simulator, accountPath: accountPath)
        do {
            try await body(side)
        } catch {
            await simulator.shutdown()
            throw error
        }
        await simulator.shutdown()
    }

    var port: Int { simulator.port ?? 0 }

    /// Worker arguments that send FCM traffic to this simulator.
    var workerArguments: [String] {
        ["--fcm-endpoint", "https://localhost:\(port)", "--fcm-ca-file", simulator.caCertificatePath]
    }

    func createDualApp(_ fleet: Fleet, id: String = "app") async throws {
        try await fleet.createApp(id)
        try await fleet.db.exec("""
            UPDATE push.apps SET fcm_project_id = \(Self.projectID), fcm_service_account_path = \(accountPath) WHERE id = \(id)
            """)
    }

    /// Registers `count` Android devices with tokens `<prefix>…` (FCM's alphabet), a day ago.
    func registerDevices(_ fleet: Fleet, _ count: Int, app: String = "app", prefix: String = "fcm") async throws {
        try await fleet.db.exec("""
            INSERT INTO push.devices (app_id, token, platform, registered_at)
            SELECT \(app), \(prefix) || '-' || lpad(g::text, 8, '0') || ':APA91b' || md5(g::text), 'android', now() - interval '1 day'
              FROM generate_series(1, \(count)) g
            """)
    }
}

extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct FCMDeliveryTests {
        @Test func aMixedPlatformBroadcastReachesEveryDeviceOnceThroughItsOwnProvider() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet) { android in
                    try await android.createDualApp(fleet)
                    try await fleet.registerDevices(700)
                    try await android.registerDevices(fleet, 300)
                    let job = try await fleet.enqueue()
                    // Before expansion the per-platform totals are counted from the audience.
                    #expect(try await Self.platformProgress(fleet, job: job) == [700, 0, 0, 700, 300, 0, 0, 300])
                    let worker = try fleet.startWorker(android.workerArguments)
                    let state = try await fleet.waitForJob(job, timeout: .seconds(120))
                    #expect(state == "done", "\(worker.log.suffix(2000))")
                    await worker.stop()
                    // ios_total, ios_delivered, ios_failed, ios_pending, then Android's.
                    #expect(try await Self.platformProgress(fleet, job: job) == [700, 700, 0, 0, 300, 300, 0, 0])

                    #expect(fleet.simulator.ledger.acceptedCount == 700)
                    #expect(fleet.simulator.ledger.duplicates.count == 0)
                    #expect(android.simulator.ledger.acceptedCount == 300)
                    #expect(android.simulator.ledger.duplicates.isEmpty)
                    #expect(android.simulator.statistics.streamLimitViolations == 0)
                    // The derived Android message: the alert as the notification.
                    let message = try #require(android.simulator.ledger.entries.first?.messageObject)
                    #expect((message["notification"] as? [String: Any])?["body"] as? String == "hello")
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 1000)
                    #expect(try await fleet.count("SELECT count(DISTINCT token) FROM push.deliveries WHERE job_id = \(job)") == 1000)
                    #expect(try await fleet.count("""
                        SELECT count(*) FROM push.deliveries d JOIN push.devices v ON v.token = d.token AND v.platform = d.platform
                         WHERE d.job_id = \(job) AND d.status = 200
                        """) == 1000)
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND platform = 'android'") == 300)
                    #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 1000)
                    // Three hundred requests, one access token.
                    #expect(android.simulator.statistics.tokenExchanges.values.reduce(0, +) == 1)
                }
            }
        }

        /// push.job_progress's per-platform columns, iOS's then Android's: total, delivered, failed, pending.
        static func platformProgress(_ fleet: Fleet, job: Int64) async throws -> [Int64?] {
            let rows = try await fleet.db.rows("""
                SELECT ios_total, ios_delivered, ios_failed, ios_pending, android_total, android_delivered, android_failed, android_pending
                  FROM push.job_progress WHERE job_id = \(job)
                """)
            for try await row in rows.decode((Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?).self) {
                return [row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7]
            }
            return []
        }

        static func waitUntil(timeout: Duration, _ condition: () async throws -> Bool) async throws {
            try await DeliveryPolicyTests.waitUntil(timeout: timeout, condition)
        }

        static func reasons(_ fleet: Fleet, job: Int64) async throws -> [String: Int64] {
            var counts: [String: Int64] = [:]
            let rows = try await fleet.db.rows("""
                SELECT coalesce(reason, status::text), count(*) FROM push.deliveries WHERE job_id = \(job) GROUP BY 1
                """)
            for try await (reason, count) in rows.decode((String, Int64).self) { counts[reason] = count }
            return counts
        }

        @Test func deadMismatchedAndInvalidTokensAreRecordedWithFCMsCodeAndPrunedByTheirRules() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet) { android in
                    try await android.createDualApp(fleet)
                    try await android.registerDevices(fleet, 200, prefix: "live")
                    try await android.registerDevices(fleet, 5, prefix: "dead")
                    try await android.registerDevices(fleet, 3, prefix: "mismatch")
                    try await android.registerDevices(fleet, 2, prefix: "invalid")
                    // This one re-registers after the send: FCM gives no timestamp, so the send's time decides.
                    try await fleet.db.exec("UPDATE push.devices SET registered_at = now() + interval '1 hour' WHERE token LIKE 'dead-00000005%'")
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(android.workerArguments)
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(1500))")
                    #expect(try await Self.platformProgress(fleet, job: job) == [0, 0, 0, 0, 210, 200, 10, 0])
                    try await Self.waitUntil(timeout: .seconds(20)) {
                        try await fleet.count("SELECT count(*) FROM push.pruned_devices") >= 4
                    }
                    await worker.stop()

                    let reasons = try await Self.reasons(fleet, job: job)
                    #expect(reasons == ["200": 200, "UNREGISTERED": 5, "SENDER_ID_MISMATCH": 3, "INVALID_ARGUMENT": 2], "\(reasons)")
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND reason = 'UNREGISTERED' AND status = 404") == 5)
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND reason = 'SENDER_ID_MISMATCH' AND status = 403") == 3)
                    #expect(try await fleet.count("""
                        SELECT count(*) FROM push.pruned_devices WHERE reason = 'UNREGISTERED' AND token LIKE 'dead-%'
                        """) == 4)
                    #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE token LIKE 'dead-00000005%'") == 1)
                    // Wrong-project and invalid-token reports wait for the app's safety valve to judge its window.
                    #expect(try await fleet.count("""
                        SELECT count(*) FROM push.prune_candidates WHERE reason IN ('SENDER_ID_MISMATCH', 'INVALID_ARGUMENT') AND NOT suppressed
                        """) + fleet.count("SELECT count(*) FROM push.pruned_devices WHERE reason IN ('SENDER_ID_MISMATCH', 'INVALID_ARGUMENT')") == 5)
                    #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 0)
                }
            }
        }

        @Test func aMassOfSenderIDMismatchPausesTheAppAsTheWrongProjectAndPrunesNothing() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet, configure: { $0.registry.mismatchedProjects = [AndroidSide.projectID] }) { android in
                    try await android.createDualApp(fleet)
                    try await android.registerDevices(fleet, 400)
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(android.workerArguments + ["--bad-device-token-min-answers", "200"])
                    _ = try await fleet.waitForJob(job, timeout: .seconds(90))
                    try await Self.waitUntil(timeout: .seconds(30)) {
                        try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 1
                    }
                    try await Task.sleep(for: .seconds(3))
                    await worker.stop()
                    #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE platform = 'android'") == 400)
                    #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices") == 0)
                    let rows = try await fleet.db.rows("SELECT paused_reason FROM push.apps WHERE id = 'app'")
                    for try await text in rows.decode(String.self) {
                        #expect(text.contains("SENDER_ID_MISMATCH") && text.contains("wrong Firebase project (\(AndroidSide.projectID))"), "\(text)")
                    }
                }
            }
        }

        @Test func quotaExceededIsRetriedNoSoonerThanRetryAfterAndEveryTokenArrivesOnce() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet, configure: {
                    $0.faults.quotaExceededRate = 0.3
                    // One second, the shortest Retry-After there is: the property is the same at any length.
                    $0.faults.quotaExceededRetryAfterSeconds = 1
                }) { android in
                    try await android.createDualApp(fleet)
                    try await android.registerDevices(fleet, 300)
                    let job = try await fleet.enqueue()
                    // A short backoff, so the Retry-After is what holds each retry back.
                    let worker = try fleet.startWorker(android.workerArguments + ["--retry-base-delay", "0.2", "--retry-max-delay", "0.5"])
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(1500))")
                    await worker.stop()
                    #expect(android.simulator.ledger.acceptedCount == 300)
                    #expect(android.simulator.ledger.duplicates.isEmpty)
                    let throttled = android.simulator.statistics.responses.filter { $0.key.status == 429 }.values.reduce(0, +)
                    #expect(throttled > 0)
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND status = 200") == 300)
                    // The first 429s came right after the job started; none of their tokens went again within 1 s.
                    #expect(try await fleet.count("""
                        SELECT count(*) FROM push.deliveries d JOIN push.jobs j ON j.id = d.job_id
                         WHERE d.job_id = \(job) AND d.attempt > 1 AND d.sent_at < j.started_at + interval '1 second'
                        """) == 0)
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND attempt > 1") > 0)
                }
            }
        }

        @Test func thirdPartyAuthErrorPausesTheAppWithoutBurningItsTokens() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet) { android in
                    try await android.createDualApp(fleet)
                    try await android.registerDevices(fleet, 500, prefix: "thirdparty")
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(android.workerArguments)
                    try await Self.waitUntil(timeout: .seconds(60)) {
                        try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason LIKE '%THIRD_PARTY_AUTH_ERROR%'") == 1
                    }
                    await worker.stop()
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 0, "tokens are given back, not recorded")
                    #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND state = 'running'") == 1)
                    let refused = android.simulator.statistics.responses.filter { $0.key.code == "THIRD_PARTY_AUTH_ERROR" }.values.reduce(0, +)
                    #expect(refused < 100, "\(refused) requests before the pause")
                }
            }
        }

        @Test func aServiceAccountTheTokenEndpointRefusesPausesTheAppWithAReadableReason() async throws {
            try await Fleet.with { fleet in
                // The simulator trusts no service account: every exchange is invalid_grant.
                try await AndroidSide.with(fleet, configure: { $0.serviceAccounts = [] }) { android in
                    try await android.createDualApp(fleet)
                    try await android.registerDevices(fleet, 50)
                    _ = try await fleet.enqueue()
                    let worker = try fleet.startWorker(android.workerArguments)
                    try await Self.waitUntil(timeout: .seconds(60)) {
                        try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 1
                    }
                    await worker.stop()
                    let rows = try await fleet.db.rows("SELECT paused_reason FROM push.apps WHERE id = 'app'")
                    for try await text in rows.decode(String.self) {
                        #expect(text.contains("invalid_grant") && text.contains(AndroidSide.clientEmail), "\(text)")
                        #expect(!text.contains("BEGIN PRIVATE KEY"))
                    }
                    #expect(android.simulator.ledger.acceptedCount == 0)
                    #expect(!worker.log.contains("PRIVATE KEY"))
                }
            }
        }

        @Test func anInvalidMessageFailsTheJobNotTheApp() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet) { android in
                    try await android.createDualApp(fleet)
                    try await android.registerDevices(fleet, 100)
                    let job = try await fleet.enqueue(", send_at => now() + interval '1 hour'")
                    // A message FCM refuses (a number in data), as a row damaged after validation would hold.
                    try await fleet.db.exec(#"UPDATE push.jobs SET fcm = '{"data":{"n":1}}', send_at = now() WHERE id = \#(job)"#)
                    let other = try await fleet.enqueue(#", fcm => '{"data":{"ok":"yes"}}'"#)
                    let worker = try fleet.startWorker(android.workerArguments)
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(60)) == "failed", "\(worker.log.suffix(1500))")
                    #expect(try await fleet.waitForJob(other, timeout: .seconds(60)) == "done")
                    try await Self.waitUntil(timeout: .seconds(10)) {
                        try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(job) AND failure_reason IS NOT NULL") == 1
                    }
                    await worker.stop()
                    #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 0)
                    let rows = try await fleet.db.rows("SELECT failure_reason FROM push.jobs WHERE id = \(job)")
                    for try await reason in rows.decode(String?.self) { #expect(reason?.hasPrefix("INVALID_ARGUMENT") == true, "\(reason ?? "nil")") }
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job)") == 100)
                }
            }
        }

        @Test func appsOfOneFirebaseProjectShareItsQuota() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet) { android in
                    // Two apps of one Firebase project, each with a job for its own 150 Android devices.
                    var jobs: [Int64] = []
                    for app in ["shop", "chat"] {
                        try await android.createDualApp(fleet, id: app)
                        try await android.registerDevices(fleet, 150, app: app, prefix: app)
                        jobs.append(try await fleet.enqueue(app: app))
                    }
                    // 3,000 a minute: 50 a second for the project, however many of its apps send.
                    let worker = try fleet.startWorker(android.workerArguments + ["--fcm-quota-per-minute", "3000"])
                    for job in jobs { #expect(try await fleet.waitForJob(job, timeout: .seconds(90)) == "done") }
                    await worker.stop()

                    let entries = android.simulator.ledger.entries.sorted { $0.receivedAt < $1.receivedAt }
                    #expect(entries.count == 300)
                    #expect(android.simulator.ledger.duplicates.isEmpty)
                    // The apps sent at the same time (so a quota per app would have let 100 a second through) ...
                    let byApp = Dictionary(grouping: entries) { $0.token.hasPrefix("shop") ? "shop" : "chat" }
                    let shop = try #require(byApp["shop"]), chat = try #require(byApp["chat"])
                    #expect(shop[0].receivedAt < chat[chat.count - 1].receivedAt && chat[0].receivedAt < shop[shop.count - 1].receivedAt)
                    // ... yet no second saw much more than the project's 50.
                    var busiest = 0, start = 0
                    for end in entries.indices {
                        while entries[end].receivedAt.timeIntervalSince(entries[start].receivedAt) >= 1 { start += 1 }
                        busiest = max(busiest, end - start + 1)
                    }
                    print("busiest second of the project: \(busiest) messages")
                    #expect(busiest <= 70, "\(busiest) messages in one second against a quota of 50 a second")
                }
            }
        }

        @Test func fiveWorkersShareOneAccessTokenPerRefreshPeriod() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet, configure: { $0.accessTokenLifetime = .seconds(8) }) { android in
                    try await android.createDualApp(fleet)
                    try await fleet.db.exec("UPDATE push.apps SET rate_limit = 200 WHERE id = 'app'")
                    try await android.registerDevices(fleet, 3000)
                    let job = try await fleet.enqueue()
                    let workers = try (0..<5).map { try fleet.startWorker(android.workerArguments, id: "oauth-\($0)") }
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done")
                    for worker in workers { await worker.stop() }
                    let exchanges = android.simulator.statistics.tokenExchanges.values.reduce(0, +)
                    let seconds = try await fleet.count("""
                        SELECT ceil(extract(epoch FROM max(sent_at) - min(sent_at)))::int8 FROM push.deliveries WHERE job_id = \(job)
                        """)
                    print("FCM token exchanges: \(exchanges) in \(seconds) s of sending")
                    #expect(exchanges >= 2, "the run did not cross a refresh")
                    // One exchange per ~7 s refresh period for the whole fleet; five workers exchanging their own
                    // would show five per period.
                    #expect(exchanges <= Int(seconds) / 7 + 2, "\(exchanges) exchanges in \(seconds) s")
                    // A request that waited for a stream slot may carry a token that expired meanwhile: its 401 gets a
                    // fresh token and a retry, never a lost or doubled notification.
                    let unauthenticated = android.simulator.statistics.responses.filter { $0.key.status == 401 }.values.reduce(0, +)
                    print("401 answers across the refreshes: \(unauthenticated)")
                    #expect(try await fleet.count("SELECT delivered FROM push.jobs WHERE id = \(job)") == 3000)
                    #expect(android.simulator.ledger.duplicates.isEmpty)
                }
            }
        }
    }
}
