import Foundation
import Logging
import PGPushCore
import PGPushSimulator
import PGPushTestSupport
import PostgresNIO
import Testing

/// The Web Push side of a fleet: push-service simulators in-process over TLS (HTTP/2 by ALPN, or HTTP/1.1
/// only), sharing the APNs simulator's CA, and the app's VAPID key file.
struct WebSide: Sendable {
    let simulators: [WebPushSimulator]
    let key: VAPIDKey
    let keyPath: String
    static let subject = "mailto:ops@example.com"

    /// Starts one simulator per entry of `http1Only` (true: HTTP/1.1 only), runs `body`, shuts them down.
    static func with(
        _ fleet: Fleet, http1Only: [Bool] = [false],
        configure: @Sendable (inout WebPushSimulatorConfiguration) -> Void = { _ in },
        _ body: @Sendable (WebSide) async throws -> Void
    ) async throws {
        var simulators: [WebPushSimulator] = []
        for only in http1Only {
            var configuration = WebPushSimulatorConfiguration()
            configuration.certificateDirectory = fleet.directory + "/simulator"
            configuration.endpointHost = "localhost"
            configuration.http1Only = only
            configuration.ledgerKeepsPayloads = true
            configuration.threadCount = 1
            configure(&configuration)
            var logger = Logger(label: "pgpush.test.webpush-simulator")
            logger.logLevel = .warning
            let simulator = WebPushSimulator(configuration: configuration, logger: logger)
            try await simulator.start()
            simulators.append(simulator)
        }
        let key = VAPIDKey.generate()
        let keyPath = fleet.directory + "/vapid.pem"
        try key.privateKeyPEM.write(toFile: keyPath, atomically: true, encoding: .utf8)
        let side = WebSide(simulators: simulators, key: key, keyPath: keyPath)
        do {
            try await body(side)
        } catch {
            for simulator in simulators { await simulator.shutdown() }
            throw error
        }
        for simulator in simulators { await simulator.shutdown() }
    }

    /// Worker arguments that allow `allowed` of the simulators' origins (all by default) and trust their CA.
    func workerArguments(allowing allowed: [WebPushSimulator]? = nil) -> [String] {
        (allowed ?? simulators).flatMap { ["--web-push-allow-origin", $0.origin!.serialized] }
            + ["--web-push-ca-file", simulators[0].caCertificatePath]
    }

    /// Gives the fleet's app its VAPID key, public key and subject.
    func configureApp(_ fleet: Fleet, id: String = "app") async throws {
        try await fleet.db.exec("""
            UPDATE push.apps SET vapid_private_key_path = \(keyPath), vapid_public_key = \(key.applicationServerKey),
                   vapid_subject = \(Self.subject)
             WHERE id = \(id)
            """)
    }

    /// Makes `count` subscriptions on `simulator` and registers them through push.register_device, as a
    /// backend would with what browsers posted.
    @discardableResult
    func subscribe(
        _ fleet: Fleet, _ count: Int, on simulator: WebPushSimulator, outcome: WebPushSimulatorRegistry.Outcome = .live,
        applicationServerKey: String? = nil, app: String = "app"
    ) async throws -> [WebPushSimulatorSubscription] {
        let made = try simulator.makeSubscriptions(
            count: count, applicationServerKey: applicationServerKey ?? key.applicationServerKey, outcome: outcome)
        let json = made.map { made in
            let keys = made.subscription.keys
            return #"{"endpoint":"\#(made.endpoint)","expirationTime":null,"keys":{"p256dh":"\#(keys.p256dhBase64URL)","auth":"\#(keys.authBase64URL)"}}"#
        }
        try await fleet.db.exec("""
            SELECT push.register_device(app_id => \(app), platform => 'web', subscription => s::jsonb) FROM unnest(\(json)::text[]) s
            """)
        return made
    }
}

extension EndToEndTests {
    @Suite(.timeLimit(.minutes(5)))
    struct WebPushDeliveryTests {
        /// push.job_progress's per-platform columns: iOS's, Android's, then web's total, delivered, failed, pending.
        static func platformProgress(_ fleet: Fleet, job: Int64) async throws -> [Int64?] {
            let rows = try await fleet.db.rows("""
                SELECT ios_total, ios_delivered, ios_failed, ios_pending, android_total, android_delivered, android_failed,
                       android_pending, web_total, web_delivered, web_failed, web_pending
                  FROM push.job_progress WHERE job_id = \(job)
                """)
            for try await row in rows.decode((Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?).self) {
                return [row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8, row.9, row.10, row.11]
            }
            return []
        }

        static func text(_ fleet: Fleet, _ query: PostgresQuery) async throws -> String? {
            for try await value in try await fleet.db.rows(query).decode(String?.self) { return value }
            return nil
        }

        @Test func oneEnqueueReachesIPhonesAndroidPhonesAndBrowsersOnHTTP2AndHTTP1Origins() async throws {
            try await Fleet.with { fleet in
                try await AndroidSide.with(fleet) { android in
                    try await WebSide.with(fleet, http1Only: [false, true]) { web in
                        try await android.createDualApp(fleet)
                        try await web.configureApp(fleet)
                        try await fleet.registerDevices(1000)
                        try await android.registerDevices(fleet, 1000)
                        let (h2, h1) = (web.simulators[0], web.simulators[1])
                        for simulator in [h2, h1] {
                            try await web.subscribe(fleet, 1480, on: simulator)
                            try await web.subscribe(fleet, 10, on: simulator, outcome: .gone)
                            try await web.subscribe(fleet, 10, on: simulator, outcome: .notFound)
                        }
                        #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE platform = 'web'") == 3000)
                        let job = try await fleet.enqueue(#", web => '{"title": "Sale", "body": "50% off"}'"#)
                        #expect(try await Self.platformProgress(fleet, job: job) == [1000, 0, 0, 1000, 1000, 0, 0, 1000, 3000, 0, 0, 3000])

                        let worker = try fleet.startWorker(android.workerArguments + web.workerArguments())
                        #expect(try await fleet.waitForJob(job, timeout: .seconds(180)) == "done", "\(worker.log.suffix(2000))")
                        #expect(try await Self.platformProgress(fleet, job: job) == [1000, 1000, 0, 0, 1000, 1000, 0, 0, 3000, 2960, 40, 0])

                        // Every device got exactly one message, on its own platform.
                        #expect(fleet.simulator.ledger.acceptedCount == 1000)
                        #expect(android.simulator.ledger.acceptedCount == 1000)
                        let plaintext = try #require(try await Self.text(fleet, "SELECT web::text FROM push.jobs WHERE id = \(job)"))
                        let served: [(WebPushSimulator, WebPushHTTPVersion)] = [(h2, .http2), (h1, .http1_1)]
                        for (simulator, version) in served {
                            #expect(simulator.ledger.acceptedCount == 1480)
                            #expect(simulator.ledger.duplicates.isEmpty)
                            #expect(simulator.ledger.acceptedCount(over: version) == 1480, "\(simulator.statistics)")
                            // Each decrypted, with its subscription's keys, to the job's plaintext.
                            #expect(simulator.ledger.entries.allSatisfy { $0.plaintextString == plaintext })
                            #expect(simulator.ledger.entries.allSatisfy { $0.urgency == .high && $0.subject == WebSide.subject })
                        }
                        let counts = try await fleet.count("""
                            SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND platform = 'web' AND status = 200
                            """)
                        #expect(counts == 2960)

                        // 404 and 410 are pruned through the pruner, with their audit rows.
                        try await FCMDeliveryTests.waitUntil(timeout: .seconds(30)) {
                            try await fleet.count("SELECT count(*) FROM push.pruned_devices") >= 40
                        }
                        await worker.stop()
                        #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices WHERE reason = 'Gone' AND token LIKE 'https://localhost:%/push/gone%'") == 20)
                        #expect(try await fleet.count("SELECT count(*) FROM push.pruned_devices WHERE reason = 'NotFound'") == 20)
                        #expect(try await fleet.count("SELECT count(*) FROM push.devices WHERE platform = 'web'") == 2960)
                        #expect(try await fleet.count("SELECT count(*) FROM push.delivery_stats WHERE platform = 'web'") > 0)
                        #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL OR web_push_paused_reason IS NOT NULL") == 0)
                    }
                }
            }
        }

        @Test func anHTTP1OnlyOriginAnsweringAfterTensOfMillisecondsGetsManyConnections() async throws {
            try await Fleet.with { fleet in
                try await WebSide.with(fleet, http1Only: [true], configure: { $0.faults.latency = .fixed(.milliseconds(40)) }) { web in
                    try await fleet.createApp()
                    try await web.configureApp(fleet)
                    try await web.subscribe(fleet, 400, on: web.simulators[0])
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(web.workerArguments())
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                    await worker.stop()
                    let statistics = web.simulators[0].statistics
                    #expect(web.simulators[0].ledger.acceptedCount == 400)
                    #expect(web.simulators[0].ledger.duplicates.isEmpty)
                    // One request at a time per HTTP/1.1 connection: a broadcast needs more than a handful.
                    #expect(statistics.http1Connections > 8, "\(statistics.http1Connections) connections")
                    #expect(statistics.http1Connections <= 32, "\(statistics.http1Connections) connections")
                }
            }
        }

        @Test func aWorkerKilledMidWebBroadcastIsRescuedAndACancelStopsTheNextOne() async throws {
            try await Fleet.with { fleet in
                try await WebSide.with(fleet, configure: { $0.faults.latency = .fixed(.milliseconds(20)) }) { web in
                    try await fleet.createApp()
                    try await web.configureApp(fleet)
                    let subscriptions = try await web.subscribe(fleet, 2000, on: web.simulators[0])
                    let simulator = web.simulators[0]
                    let job = try await fleet.enqueue()
                    let flags = ["--lease", "3", "--heartbeat-interval", "1"] + web.workerArguments()
                    let crashed = try fleet.startWorker(flags, id: "crashed")
                    try await SchedulingTests.waitUntilDelivered(fleet, job: job, atLeast: 300)
                    crashed.signal(SIGKILL)
                    _ = await crashed.waitForExit(timeout: .seconds(10))
                    let rescuer = try fleet.startWorker(flags, id: "rescuer")
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(rescuer.log.suffix(2000))")
                    // Every subscription reached. What the dead worker sent without recording it is sent again by the
                    // rescuer (at least once), and only once more.
                    #expect(subscriptions.allSatisfy { (1...2).contains(simulator.ledger.count(forSubscription: $0.id)) })
                    #expect(try await Self.platformProgress(fleet, job: job) == [0, 0, 0, 0, 0, 0, 0, 0, 2000, 2000, 0, 0])

                    // A cancel mid-broadcast stops it: nothing is sent after it, and the counts still add up.
                    let second = try await fleet.enqueue()
                    try await SchedulingTests.waitUntilDelivered(fleet, job: second, atLeast: 300)
                    #expect(try await fleet.count("SELECT push.cancel(\(second))::int::int8") == 1)
                    try await EndToEndTests.DeliveryPolicyTests.waitUntil(timeout: .seconds(30)) {
                        try await fleet.count("SELECT count(*) FROM push.chunks WHERE job_id = \(second)") == 0
                    }
                    try await Task.sleep(for: .milliseconds(500))
                    let acceptedAfterCancel = simulator.ledger.acceptedCount
                    try await Task.sleep(for: .seconds(1))
                    #expect(simulator.ledger.acceptedCount == acceptedAfterCancel, "Web Push sends after the cancel")
                    await rescuer.stop()
                    #expect(try await fleet.count("SELECT count(*) FROM push.jobs WHERE id = \(second) AND state = 'cancelled'") == 1)
                    let recorded = try await fleet.count("""
                        SELECT count(*) FROM push.deliveries WHERE job_id = \(second) AND platform = 'web' AND status = 200
                        """)
                    #expect(try await fleet.count("SELECT web_delivered FROM push.jobs WHERE id = \(second)") == recorded)
                    // What was not sent left the total for cancelled_tokens; the rest are outcomes, web's among them.
                    #expect(try await fleet.count("SELECT total - delivered - failed - expired FROM push.jobs WHERE id = \(second)") == 0)
                    #expect(try await fleet.count("SELECT web_total - web_delivered - web_failed FROM push.jobs WHERE id = \(second)") == 0)
                    #expect(try await fleet.count("SELECT total + cancelled_tokens FROM push.jobs WHERE id = \(second)") == 2000)
                    #expect(try await Self.platformProgress(fleet, job: second).last == 0, "a cancelled job has nothing pending")
                }
            }
        }

        @Test func anEndpointOutsideTheAllowedOriginsFailsAndIsNeverConnectedTo() async throws {
            try await Fleet.with { fleet in
                try await WebSide.with(fleet, http1Only: [false, false]) { web in
                    try await fleet.createApp()
                    try await web.configureApp(fleet)
                    let (allowed, outside) = (web.simulators[0], web.simulators[1])
                    try await web.subscribe(fleet, 20, on: allowed)
                    let strangers = try await web.subscribe(fleet, 5, on: outside)
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(web.workerArguments(allowing: [allowed]))
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                    await worker.stop()
                    #expect(allowed.ledger.acceptedCount == 20)
                    #expect(outside.statistics.connectionsAccepted == 0, "no connection to an origin that is not allowed")
                    #expect(outside.ledger.acceptedCount == 0)
                    #expect(try await fleet.count("""
                        SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND reason = 'EndpointNotAllowed' AND status = 0
                        """) == 5)
                    // The endpoints' paths never reach the logs.
                    #expect(!strangers.contains { worker.log.contains($0.id) })
                }
            }
        }

        @Test func aRefusedVAPIDKeyPausesTheAppsWebPushWhileItsIPhonesReceiveTheSameJob() async throws {
            try await Fleet.with { fleet in
                try await WebSide.with(fleet) { web in
                    try await fleet.createApp()
                    try await web.configureApp(fleet)
                    try await fleet.registerDevices(200)
                    // Subscribed with another key: the push service answers 403 to this app's tokens.
                    try await web.subscribe(fleet, 50, on: web.simulators[0], applicationServerKey: VAPIDKey.generate().applicationServerKey)
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(web.workerArguments())
                    try await FCMDeliveryTests.waitUntil(timeout: .seconds(90)) {
                        let paused = try await fleet.count("SELECT count(*) FROM push.apps WHERE web_push_paused_reason IS NOT NULL")
                        let delivered = try await fleet.count("SELECT ios_delivered FROM push.job_progress WHERE job_id = \(job)")
                        return paused == 1 && delivered == 200
                    }
                    try await Task.sleep(for: .seconds(2))
                    await worker.stop()
                    #expect(fleet.simulator.ledger.acceptedCount == 200)
                    #expect(try await fleet.count("SELECT count(*) FROM push.apps WHERE paused_reason IS NOT NULL") == 0)
                    let reason = try #require(try await Self.text(fleet, "SELECT web_push_paused_reason FROM push.apps WHERE id = 'app'"))
                    #expect(reason.contains("403"), "\(reason)")
                    // The web tokens wait for a resume; none is recorded as failed.
                    #expect(try await fleet.count("SELECT web_failed FROM push.jobs WHERE id = \(job)") == 0)
                    #expect(try await fleet.count("SELECT web_pending FROM push.job_progress WHERE job_id = \(job)") == 50)
                    #expect(try await fleet.count("SELECT count(*) FROM push.job_events WHERE event = 'app_paused' AND body ->> 'provider' = 'webpush'") == 1)
                }
            }
        }

        @Test func aKeyFileThatDoesNotMatchThePublicKeyPausesWebPushAndSaysSo() async throws {
            try await Fleet.with { fleet in
                try await WebSide.with(fleet) { web in
                    try await fleet.createApp()
                    try await web.configureApp(fleet)
                    try await fleet.registerDevices(50)
                    try await web.subscribe(fleet, 10, on: web.simulators[0])
                    // The workers' file holds another key than the one the site's subscriptions were made with.
                    try VAPIDKey.generate().privateKeyPEM.write(toFile: web.keyPath, atomically: true, encoding: .utf8)
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(web.workerArguments())
                    try await FCMDeliveryTests.waitUntil(timeout: .seconds(90)) {
                        let paused = try await fleet.count("SELECT count(*) FROM push.apps WHERE web_push_paused_reason IS NOT NULL")
                        let delivered = try await fleet.count("SELECT ios_delivered FROM push.job_progress WHERE job_id = \(job)")
                        return paused == 1 && delivered == 50
                    }
                    await worker.stop()
                    let reason = try #require(try await Self.text(fleet, "SELECT web_push_paused_reason FROM push.apps WHERE id = 'app'"))
                    #expect(reason.contains("does not match vapid_public_key"), "\(reason)")
                    #expect(!reason.contains("PRIVATE KEY"), "the key itself never goes into the database")
                    #expect(web.simulators[0].statistics.connectionsAccepted == 0, "nothing is signed with the wrong key")
                    #expect(try await fleet.count("SELECT web_pending FROM push.job_progress WHERE job_id = \(job)") == 10)
                }
            }
        }

        @Test func aMessageTooLargeForThePushServiceFailsTheJobsWebPartWhileIPhonesReceiveIt() async throws {
            try await Fleet.with { fleet in
                try await WebSide.with(fleet, configure: { $0.maximumBodySize = 64 }) { web in
                    try await fleet.createApp()
                    try await web.configureApp(fleet)
                    try await fleet.registerDevices(100)
                    try await web.subscribe(fleet, 100, on: web.simulators[0])
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(web.workerArguments())
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(120)) == "done", "\(worker.log.suffix(2000))")
                    await worker.stop()
                    #expect(fleet.simulator.ledger.acceptedCount == 100)
                    #expect(try await Self.platformProgress(fleet, job: job) == [100, 100, 0, 0, 0, 0, 0, 0, 100, 0, 100, 0])
                    #expect(try await fleet.count("SELECT count(*) FROM push.deliveries WHERE job_id = \(job) AND reason = 'PayloadTooLarge'") == 100)
                    // A handful of requests tell; the rest are not sent.
                    let requests = web.simulators[0].statistics.pushRequests
                    #expect(requests < 100, "\(requests) requests")
                }
            }
        }

        @Test func withTooManyRequestsAndUnavailableAnswersEveryLiveSubscriptionGetsTheMessageOnce() async throws {
            try await Fleet.with { fleet in
                try await WebSide.with(fleet, configure: {
                    $0.faults.tooManyRequestsRate = 0.05
                    $0.faults.tooManyRequestsRetryAfterSeconds = 1
                    $0.faults.serviceUnavailableRate = 0.05
                }) { web in
                    try await fleet.createApp()
                    try await web.configureApp(fleet)
                    let subscriptions = try await web.subscribe(fleet, 600, on: web.simulators[0])
                    let job = try await fleet.enqueue()
                    let worker = try fleet.startWorker(web.workerArguments())
                    #expect(try await fleet.waitForJob(job, timeout: .seconds(180)) == "done", "\(worker.log.suffix(2000))")
                    await worker.stop()
                    let simulator = web.simulators[0]
                    #expect(simulator.statistics.responses.keys.contains { $0.status == 429 })
                    #expect(simulator.statistics.responses.keys.contains { $0.status == 503 })
                    #expect(simulator.ledger.acceptedCount == 600)
                    #expect(simulator.ledger.duplicates.isEmpty)
                    #expect(subscriptions.allSatisfy { simulator.ledger.count(forSubscription: $0.id) == 1 })
                    #expect(try await fleet.count("SELECT web_delivered FROM push.jobs WHERE id = \(job)") == 600)
                    // The derived message: the APNs alert as the body.
                    #expect(simulator.ledger.entries.first?.plaintextString == #"{"body": "hello"}"#)
                }
            }
        }
    }
}
