import Crypto
import CryptoExtras
import Foundation
import Logging
import PGPushCLISupport
import PGPushCore
import PGPushSimulator
import PGPushDevelopment
import PGPushStore
import PostgresNIO

/// Everything one end-to-end broadcast needs, owned in one place so it can all be torn down: a database
/// (throwaway cluster or the caller's), the APNs simulator (in-process or external), an app with a fresh P-256
/// key, its devices, and `pgpush worker` child processes. With Android devices, also the FCM simulator
/// in-process and a fresh service account the app holds; with web subscriptions, a Web Push simulator
/// in-process (or nginx) and a fresh VAPID key (`BroadcastRig+WebPush.swift`).
///
/// Used by `pgpush demo` and `pgpush bench broadcast`. ``cleanup()`` is idempotent and runs on every exit path.
final class BroadcastRig: @unchecked Sendable {
    /// How the rig is built.
    struct Configuration {
        /// The caller's database; `nil` starts a throwaway cluster.
        var databaseURL: String?
        /// An external simulator (base URL and its CA file); `nil` runs one in this process.
        var externalSimulator: (endpoint: String, caFile: String)?
        /// The signing key the external simulator trusts (PEM file, team id, key id); `nil` generates one.
        var externalKey: (file: String, teamID: String, keyID: String)?
        /// Prefix of the app id; a random suffix keeps runs on a shared database apart.
        var appPrefix: String
        /// Extra `pgpush worker` flags (chunk size, connections per app, …).
        var workerArguments: [String] = []
        var logger: Logger
        /// How long the in-process simulator waits before each answer (ignored with an external simulator).
        var simulatorLatency: SimulatorLatency = .none
        /// Further faults of the in-process APNs simulator (5xx answers, GOAWAYs); its latency is
        /// ``simulatorLatency``. Ignored with an external simulator.
        var simulatorFaults = SimulatorFaults()
        /// Whether the app has Android devices too: the FCM simulator runs in-process (not with an external
        /// APNs simulator) and the app gets an FCM credential.
        var withAndroid = false
        /// Whether the app has web subscriptions too: a Web Push simulator runs in-process (or the nginx stand-in
        /// answers them as well), the app gets a fresh VAPID key, and the workers allow the push service's origin
        /// and trust its CA. Not with an external simulator.
        var withWeb = false
        /// The workers' `--maintenance-interval` in seconds; `nil` keeps the worker's default. The demo waits
        /// for pruning, which runs in maintenance, so it asks for 1 s; a benchmark measures the defaults, and
        /// a pass costs the database a read of every active job (`push.queue_backlog`).
        var maintenanceIntervalSeconds: Int? = 1
        /// A round trip the workers' connections to PostgreSQL take on top of loopback, through a delaying
        /// TCP proxy (``DelayingTCPProxy``): a database one network hop away. The rig's own connection and the
        /// producers stay direct.
        var databaseRoundTrip: Duration?
        /// Whether a throwaway nginx (``NginxAPNsStandIn``) stands in for APNs instead of the simulator: a C
        /// server that checks nothing, for measuring the workers alone (the simulator's ledger is not kept).
        var nginxStandIn = false
        /// Whether the in-process simulator takes a new provider token from the rig's key at any time. h2load
        /// signs its own before the workers sign theirs, and APNs' rule (one new token per 20 minutes) would
        /// answer the workers' `429 TooManyProviderTokenUpdates`.
        var acceptsAnyTokenRefresh = false
    }

    /// How many devices of each kind were registered.
    struct Devices: Sendable {
        var live: Int
        var dead: Int
        var bad: Int
        /// Of the live devices, how many are Android (FCM); the rest are iOS and web.
        var android: Int = 0
        /// Of the live devices, how many are web subscriptions (Web Push).
        var web: Int = 0
        /// Of the dead devices, how many are web subscriptions the push service answers 404 Not Found (half) or
        /// 410 Gone (the other half); the rest are iOS tokens answered 410 Unregistered. All are pruned.
        var webDead: Int = 0
        /// Of the web subscriptions (live first, then dead), how many are registered through
        /// `push.register_device` as a backend would; the rest are inserted into `push.devices` directly, in
        /// batches (the producer API's checks cost about half a millisecond of the database's time each).
        var webThroughAPI: Int = 0
        /// Whether the live iOS devices are Live Activity update tokens (one activity each) instead.
        var activityTokens = false
        /// Locales the live devices take in turn, every sixth one none (``BroadcastRig/deviceLocales``); empty:
        /// no device has a locale.
        var locales: [String] = []
        var total: Int { live + dead + bad }

        /// The live iOS devices (or update tokens).
        var iosLive: Int { live - android - web }

        /// `count` devices of which ~`deadShare` are dead (410, or 404 for web) and ~`badShare` malformed
        /// (BadDeviceToken), ~`androidShare` of the live ones Android and ~`webShare` web subscriptions (at most
        /// what Android leaves), and ~`webShare` of the dead ones web subscriptions.
        init(count: Int, deadShare: Double = 0, badShare: Double = 0, androidShare: Double = 0, webShare: Double = 0) {
            dead = Int(Double(count) * deadShare)
            bad = Int(Double(count) * badShare)
            live = count - dead - bad
            android = Int((Double(live) * min(max(androidShare, 0), 1)).rounded())
            let webShare = min(max(webShare, 0), 1)
            web = min(Int((Double(live) * webShare).rounded()), live - android)
            webDead = Int((Double(dead) * webShare).rounded())
        }

        var json: [String: Any] {
            ["total": total, "live": live, "dead": dead, "bad": bad, "android": android, "web": web, "web_dead": webDead,
             "web_through_api": min(webThroughAPI, web + webDead), "ios": total - android - web - webDead]
        }
    }

    let configuration: Configuration
    let appID: String
    /// Temporary directory for the key, the simulator's certificates and the worker logs.
    let directory: String
    private(set) var cluster: ThrowawayPostgres?
    private(set) var simulator: APNsSimulator?
    private(set) var databaseProxy: DelayingTCPProxy?
    private(set) var nginx: NginxAPNsStandIn?
    /// Where the workers connect: ``databaseURL``, or the delaying proxy in front of it.
    private var workerDatabaseURL = ""
    private(set) var fcmSimulator: FCMSimulator?
    private var fcmEndpoint: String?
    /// The Web Push simulator in this process (`nil` without web subscriptions, or with nginx standing in).
    var webSimulator: WebPushSimulator? { lock.withLock { webState.simulator } }
    /// What ``setUpWeb()`` made: the push service (simulator or nginx), its origin and CA, the app's VAPID key.
    var webState = WebState()
    struct WebState {
        var simulator: WebPushSimulator?
        var origin: String?
        var caFile: String?
        var key: VAPIDKey?
    }
    private(set) var connection: PostgresConnection?
    private(set) var workers: [WorkerProcess] = []
    private var endpoint = ""
    private var caFile = ""
    private var databaseURL = ""
    private var workerGeneration = 0
    let lock = NSLock()
    private var logger: Logger { configuration.logger }

    init(configuration: Configuration) throws {
        self.configuration = configuration
        self.appID = "\(configuration.appPrefix)-\(UUID().uuidString.prefix(8).lowercased())"
        self.directory = try makeTemporaryDirectory(prefix: "pgpush-rig-")
    }

    /// The throwaway cluster's directory, if one was started (it is gone after ``cleanup()``).
    var clusterDirectory: String? { cluster?.directory }

    /// Database, schema, simulator and app; the devices come with ``registerDevices(_:)``.
    func setUp() async throws {
        if let url = configuration.databaseURL {
            databaseURL = url
        } else {
            let cluster = try ThrowawayPostgres.start()
            lock.withLock { self.cluster = cluster }
            databaseURL = cluster.url
        }
        let url = try DatabaseURL(databaseURL)
        workerDatabaseURL = databaseURL
        if let roundTrip = configuration.databaseRoundTrip {
            let proxy = try await DelayingTCPProxy(targetHost: url.host, targetPort: url.port, roundTrip: roundTrip)
            lock.withLock { self.databaseProxy = proxy }
            let password = url.password.flatMap { $0.addingPercentEncoding(withAllowedCharacters: .urlPasswordAllowed) }.map { ":" + $0 } ?? ""
            workerDatabaseURL = "postgres://\(url.username)\(password)@127.0.0.1:\(proxy.port)/\(url.database)?sslmode=\(url.sslMode.rawValue)"
        }
        let migrating = try await connectToDatabase(url, id: 1, logger: logger)
        do {
            _ = try await Migrator(logger: logger).migrate(connection: migrating)
        } catch {
            try? await migrating.close()
            throw error
        }
        try await migrating.close()
        // The rig's own connection is opened after the migrations, so it has the database's settings they made:
        // with `jit` still on, each progress poll of a 1,000,000-device broadcast JIT-compiled push.job_progress
        // (its plan is estimated past jit_above_cost), 0.3 s of the server's CPU every half second.
        let connection = try await connectToDatabase(url, id: 1, logger: logger)
        lock.withLock { self.connection = connection }

        let (keyPath, teamID, keyID, publicKey) = try signingKey()
        providerKey = (keyPath, teamID, keyID)
        if configuration.nginxStandIn {
            let (nginx, nginxCA) = try NginxAPNsStandIn.start(certificateDirectory: "\(directory)/nginx-certificates")
            lock.withLock { self.nginx = nginx }
            endpoint = nginx.endpoint
            caFile = nginxCA
        } else if let external = configuration.externalSimulator {
            endpoint = external.endpoint
            caFile = external.caFile
        } else {
            var simulatorConfiguration = APNsSimulatorConfiguration()
            simulatorConfiguration.certificateDirectory = "\(directory)/simulator"
            simulatorConfiguration.tokenKeys = [SimulatorTokenKey(teamID: teamID, keyID: keyID, publicKey: publicKey!)]
            simulatorConfiguration.faults = configuration.simulatorFaults
            simulatorConfiguration.faults.latency = configuration.simulatorLatency
            if configuration.acceptsAnyTokenRefresh { simulatorConfiguration.providerTokenMinimumRefreshInterval = .zero }
            var simulatorLogger = logger
            simulatorLogger.logLevel = .warning
            let simulator = APNsSimulator(configuration: simulatorConfiguration, logger: simulatorLogger)
            lock.withLock { self.simulator = simulator }
            let port = try await simulator.start()
            endpoint = "https://127.0.0.1:\(port)"
            caFile = simulator.caCertificatePath
        }
        let app = AppRegistration(
            id: appID, environment: "production", topic: Self.topic, teamID: teamID, keyID: keyID,
            keyPath: keyPath, certificatePath: nil, passwordEnv: nil, fcmProjectID: nil, fcmServiceAccount: nil, rateLimit: nil)
        guard try await operatorStore.addApp(app) else { throw EmbeddedError("app \(appID) exists already") }
        if configuration.withAndroid { try await setUpFCM() }
        if configuration.withWeb { try await setUpWeb(nginxCAFile: configuration.nginxStandIn ? caFile : nil) }
    }

    /// The FCM simulator in-process (sharing the APNs simulator's CA) and a fresh service account for the app.
    private func setUpFCM() async throws {
        guard configuration.externalSimulator == nil else {
            throw EmbeddedError("Android devices need the in-process simulators; drop --simulator-endpoint")
        }
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let projectID = "pgpush-demo"
        let clientEmail = "pgpush-demo@pgpush-demo.iam.gserviceaccount.com"
        var fcmConfiguration = FCMSimulatorConfiguration()
        fcmConfiguration.certificateDirectory = "\(directory)/simulator"
        fcmConfiguration.serviceAccounts = [FCMSimulatorServiceAccount(
            clientEmail: clientEmail, projectID: projectID, publicKey: key.publicKey, privateKeyID: "demo-key")]
        fcmConfiguration.faults.latency = configuration.simulatorLatency
        // FCM's own limit is not published; Google's front ends commonly allow about 100 streams.
        fcmConfiguration.maxConcurrentStreams = 1000
        var simulatorLogger = logger
        simulatorLogger.logLevel = .warning
        let simulator = FCMSimulator(configuration: fcmConfiguration, logger: simulatorLogger)
        lock.withLock { self.fcmSimulator = simulator }
        let port = try await simulator.start()
        fcmEndpoint = "https://127.0.0.1:\(port)"
        let account: [String: String] = [
            "type": "service_account", "project_id": projectID, "private_key_id": "demo-key",
            "private_key": key.pkcs8PEMRepresentation, "client_email": clientEmail,
            "token_uri": "https://127.0.0.1:\(port)/token",
        ]
        let path = "\(directory)/firebase-service-account.json"
        guard FileManager.default.createFile(
            atPath: path, contents: try JSONSerialization.data(withJSONObject: account), attributes: [.posixPermissions: 0o600])
        else { throw EmbeddedError("cannot write the service account to \(path)") }
        try await database.setFCMCredential(appID: appID, projectID: projectID, serviceAccountPath: path)
    }

    /// The .p8 key the workers sign with: the external one, or a new P-256 key written to the rig's directory.
    private func signingKey() throws -> (path: String, teamID: String, keyID: String, publicKey: P256.Signing.PublicKey?) {
        if let external = configuration.externalKey {
            return (external.file, external.teamID, external.keyID, nil)
        }
        let key = P256.Signing.PrivateKey()
        let path = "\(directory)/AuthKey_PGPDEMOKY1.p8"
        guard FileManager.default.createFile(
            atPath: path, contents: Data(key.pemRepresentation.utf8), attributes: [.posixPermissions: 0o600])
        else { throw EmbeddedError("cannot write the signing key to \(path)") }
        return (path, "PGPDEMOTM1", "PGPDEMOKY1", key.publicKey)
    }

    /// Registers the devices in one statement each kind
    /// (``RigStore/registerDevices(appID:ios:android:dead:bad:iosAsActivityTokens:locales:)``), and the web
    /// subscriptions in batches (``registerWebSubscriptions(_:)``).
    func registerDevices(_ devices: Devices) async throws {
        let database = try database
        try await database.registerDevices(
            appID: appID, ios: devices.iosLive, android: devices.android, dead: devices.dead - devices.webDead, bad: devices.bad,
            iosAsActivityTokens: devices.activityTokens, locales: devices.locales)
        if devices.web + devices.webDead > 0 { try await registerWebSubscriptions(devices) }
        try await database.analyzeDevices()
    }

    /// The rig app's bundle id.
    static let topic = "com.example.pgpush-demo"

    /// The key the workers sign provider tokens with (after ``setUp()``).
    private(set) var providerKey: (path: String, teamID: String, keyID: String)?

    /// h2load against the endpoint the workers send to, with a provider token from the workers' key and the
    /// body of the rig's alert (or of its Live Activity update): the same run's baseline.
    func h2load(_ baseline: H2LoadBaseline, liveActivity: Bool = false) async throws -> H2LoadBaseline.Result {
        guard let providerKey, !endpoint.isEmpty else { throw EmbeddedError("the rig is not set up") }
        let signer = try ProviderTokenSigner(teamID: providerKey.teamID, keyID: providerKey.keyID, keyFile: providerKey.path)
        return try await baseline.run(
            endpoint: endpoint, signer: signer,
            topic: liveActivity ? Self.topic + ".push-type.liveactivity" : Self.topic,
            pushType: liveActivity ? "liveactivity" : "alert", body: liveActivity ? Self.activityUpdate : Self.payload)
    }

    /// The notification every rig job sends.
    static let payload = #"{"aps":{"alert":{"title":"pgpush","body":"Hello from the pgpush demo"}}}"#
    /// A Live Activity update, for the update tokens of ``Devices/activityTokens``.
    static let activityUpdate = #"{"aps":{"timestamp":1767225600,"event":"update","content-state":{"score":"2-1","minute":89}}}"#

    /// Enqueues a Live Activity update to every update token of the app and returns the job id.
    func enqueueActivityUpdate() async throws -> Int64 {
        guard let job = try await database.enqueue(appID: appID, payload: Self.activityUpdate, pushType: "liveactivity")
        else { throw EmbeddedError("push.enqueue returned nothing") }
        return job
    }

    /// Locales of the devices registered with per-device content (``Devices/locales``): `en` has no variant
    /// (the job's own message), `fr-ca` gets `fr`'s.
    static let deviceLocales = ["en", "fr", "fr-ca", "de", "es", "pt-br", "ja"]

    /// The locale variants of a broadcast with per-device content: each overrides `aps.alert` with one of about
    /// the default payload's size (``payload``).
    static let localizedAlerts = #"""
        {"fr":{"aps":{"alert":{"title":"pgpush","body":"Bonjour de la démo pgpush"}}},\#
        "de":{"aps":{"alert":{"title":"pgpush","body":"Hallo aus der pgpush-Demo"}}},\#
        "es":{"aps":{"alert":{"title":"pgpush","body":"Hola desde la demo de pgpush"}}},\#
        "pt-br":{"aps":{"alert":{"title":"pgpush","body":"Olá da demo do pgpush"}}},\#
        "ja":{"aps":{"alert":{"title":"pgpush","body":"pgpush デモからこんにちは"}}}}
        """#

    /// How many variants ``localizedAlerts`` has.
    static var localizedAlertCount: Int {
        ((try? JSONSerialization.jsonObject(with: Data(localizedAlerts.utf8))) as? [String: Any])?.count ?? 0
    }

    /// Enqueues a broadcast to every device of the app (or to those of `userIDs`, or those with all of `tags`)
    /// and returns the job id. With `perDeviceContent`, each device gets its locale's variant
    /// (``localizedAlerts``) and its own badge counter plus one (`badge => 'increment'`); with `maxRate`, the job
    /// goes at most that many notifications a second across the workers (`max_rate`).
    func enqueue(
        userIDs: [String]? = nil, tags: [String]? = nil, priority: Int = 0, perDeviceContent: Bool = false, maxRate: Int? = nil
    ) async throws -> Int64 {
        guard let job = try await database.enqueue(
            appID: appID, payload: Self.payload, userIDs: userIDs, tags: tags, priority: priority,
            localized: perDeviceContent ? Self.localizedAlerts : nil, badge: perDeviceContent ? "increment" : nil,
            maxRate: maxRate)
        else { throw EmbeddedError("push.enqueue returned nothing") }
        return job
    }

    /// The app's devices, and how many of them have a badge counter of exactly `value`.
    func badgeCounters(at value: Int) async throws -> (devices: Int64, atValue: Int64) {
        try await database.badgeCounters(appID: appID, at: value)
    }

    /// Starts `count` worker processes against the rig's database and simulator.
    func startWorkers(_ count: Int) throws {
        workerGeneration += 1
        for index in 1...max(count, 1) {
            try startWorker(id: "\(appID)-w\(workerGeneration).\(index)")
        }
    }

    private func startWorker(id: String) throws {
        var arguments = [
            "--database-url", workerDatabaseURL, "--apns-endpoint", endpoint, "--apns-ca-file", caFile,
            "--metrics-port=-1",
        ] + (configuration.maintenanceIntervalSeconds.map { ["--maintenance-interval", String($0)] } ?? [])
            + configuration.workerArguments
        if let channelsPort = lock.withLock({ simulator?.channelsPort }) {
            arguments += ["--apns-channels-endpoint", "https://127.0.0.1:\(channelsPort)"]
        }
        if let fcmEndpoint, let fcmCA = lock.withLock({ fcmSimulator?.caCertificatePath }) {
            // The simulator enforces no project quota; FCM's default (10,000 a second) would cap every run.
            arguments += ["--fcm-endpoint", fcmEndpoint, "--fcm-ca-file", fcmCA, "--fcm-quota-per-minute", "100000000"]
        }
        let web = lock.withLock { webState }
        if let origin = web.origin, let webCA = web.caFile {
            arguments += ["--web-push-allow-origin", origin, "--web-push-ca-file", webCA]
        }
        let worker = try WorkerProcess(id: id, arguments: arguments, logPath: "\(directory)/\(id).log")
        lock.withLock { workers.append(worker) }
    }

    /// Workers replaced after exiting on their own, and what they reported.
    private(set) var replacedWorkers: [WorkerProcess.Report] = []

    /// A worker that exited before being stopped is replaced, at most `maximumReplacements` times in a run:
    /// a clean exit (status 0) means something outside signalled it, and the broadcast can still finish.
    /// A worker that failed (bad flags, unreachable database) or too many replacements end the run.
    func checkWorkersAlive(maximumReplacements: Int = 3) async throws {
        for worker in lock.withLock({ workers }) where !worker.isRunning {
            let report = await worker.stop()
            guard report.exitStatus == 0, replacedWorkers.count < maximumReplacements else {
                throw EmbeddedError("worker \(worker.id) exited early (status \(report.exitStatus)):\n\(worker.logTail())")
            }
            FileHandle.standardError.write(Data(
                "pgpush: worker \(worker.id) exited unexpectedly (status 0, signalled from outside?); starting a replacement\n".utf8))
            lock.withLock { workers.removeAll { $0 === worker } }
            replacedWorkers.append(report)
            try startWorker(id: worker.id + "r")
        }
    }

    /// The running workers' ids (their `push.workers` ids).
    var workerIDs: [String] { lock.withLock { workers.map(\.id) } }

    /// The running workers (for sampling their /proc entries).
    var runningWorkers: [WorkerProcess] { lock.withLock { workers } }

    /// SIGTERMs the first running worker, waits (at most `timeout`, then SIGKILL) for it to drain and exit, and
    /// starts a replacement with the same flags: a deploy of one worker. The worker leaves the list before the
    /// signal, so ``checkWorkersAlive(maximumReplacements:)`` never mistakes it for one that died.
    func restartWorker(timeout: Duration = .seconds(60)) async throws -> (stopped: WorkerProcess.Report, started: String) {
        guard let worker = lock.withLock({ () -> WorkerProcess? in
            guard !workers.isEmpty else { return nil }
            return workers.removeFirst()
        }) else { throw EmbeddedError("no worker to restart") }
        worker.terminate()
        let deadline = ContinuousClock.now + timeout
        while worker.isRunning && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(50))
        }
        let report = await worker.stop(timeout: .seconds(1))
        let id = worker.id + "-restarted"
        try startWorker(id: id)
        return (report, id)
    }

    /// Replaces the rig's own connection when it was closed (the server restarted); returns whether it did.
    @discardableResult
    func reconnectIfClosed() async throws -> Bool {
        guard let old = lock.withLock({ self.connection }), old.isClosed else { return false }
        let fresh = try await connectToDatabase(try DatabaseURL(databaseURL), id: 1, logger: logger)
        let replaced = lock.withLock { () -> PostgresConnection? in
            defer { self.connection = fresh }
            return self.connection
        }
        try? await replaced?.close()
        return true
    }

    /// What the in-process APNs simulator has seen so far (`nil` with an external one).
    var simulatorStatistics: SimulatorStatistics? { lock.withLock { self.simulator }?.statistics }

    /// The last lines of every running worker's log, for error messages.
    func workerLogTail() -> String {
        lock.withLock { workers }.map { "\($0.id):\n\($0.logTail())" }.joined(separator: "\n")
    }

    /// Samples every running worker's peak RSS.
    func sampleWorkerMemory() {
        for worker in lock.withLock({ workers }) { worker.samplePeakRSS() }
    }

    /// The throwaway cluster's CPU time so far (``ClusterCPUTime``); `nil` with the caller's database.
    func postgresCPUSeconds() -> Double? {
        clusterDirectory.flatMap { ClusterCPUTime.seconds(dataDirectory: "\($0)/data") }
    }

    /// The running workers' CPU time so far (user + system), or `nil` if one of them cannot be read.
    func workerCPUSeconds() -> Double? {
        let samples = lock.withLock { workers }.map { $0.cpuSeconds() }
        let values = samples.compactMap { $0 }
        return values.count == samples.count && !values.isEmpty ? values.reduce(0, +) : nil
    }

    /// SIGTERMs every worker at once, then collects their reports (with those of replaced workers).
    func stopWorkers() async -> [WorkerProcess.Report] {
        let stopping = lock.withLock { () -> [WorkerProcess] in
            defer { workers = [] }
            return workers
        }
        for worker in stopping { worker.terminate() }
        var reports = replacedWorkers
        replacedWorkers = []
        for worker in stopping { reports.append(await worker.stop()) }
        return reports
    }

    /// Workers, simulator, connection, cluster and temporary files, in that order. Safe to call more than once.
    func cleanup() async {
        _ = await stopWorkers()
        let (simulator, fcmSimulator, webSimulator, connection, cluster) = lock.withLock {
            () -> (APNsSimulator?, FCMSimulator?, WebPushSimulator?, PostgresConnection?, ThrowawayPostgres?) in
            defer {
                self.simulator = nil; self.fcmSimulator = nil; self.webState.simulator = nil; self.connection = nil
                self.cluster = nil
            }
            return (self.simulator, self.fcmSimulator, self.webState.simulator, self.connection, self.cluster)
        }
        await simulator?.shutdown()
        await fcmSimulator?.shutdown()
        await webSimulator?.shutdown()
        await lock.withLock({ self.databaseProxy })?.shutdown()
        lock.withLock({ self.nginx })?.stop()
        try? await connection?.close()
        cluster?.stop()
        if configuration.databaseURL != nil, let connection = try? await reconnectForCleanup() {
            // On the caller's database, remove what the run created so repeated runs do not pile up devices.
            try? await RigStore(connection: connection, logger: logger).deleteDevices(appID: appID)
            try? await connection.close()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func reconnectForCleanup() async throws -> PostgresConnection {
        try await connectToDatabase(try DatabaseURL(databaseURL), id: 2, logger: logger)
    }

    /// A further connection to the rig's database (after ``setUp()``), for producers that must not share the
    /// rig's own; the caller closes it.
    func openConnection(id: Int) async throws -> PostgresConnection {
        try await connectToDatabase(try DatabaseURL(databaseURL), id: id, logger: logger)
    }

    /// The simulators' accepted count and duplicated tokens, when they run in-process (APNs, FCM and Web Push
    /// together).
    var ledger: (accepted: Int, duplicates: Int)? {
        guard let simulator = lock.withLock({ self.simulator }) else { return nil }
        let fcm = fcmLedger ?? (0, 0)
        let web = webLedger.map { ($0.accepted, $0.duplicates) } ?? (0, 0)
        return (simulator.ledger.acceptedCount + fcm.accepted + web.0, simulator.ledger.duplicates.count + fcm.duplicates + web.1)
    }

    /// Channel broadcasts the in-process simulator accepted (0 with an external one).
    var broadcastRequests: Int {
        lock.withLock { self.simulator }?.broadcastLedger.count ?? 0
    }

    /// The FCM simulator's part of ``ledger``.
    var fcmLedger: (accepted: Int, duplicates: Int)? {
        guard let simulator = lock.withLock({ self.fcmSimulator }) else { return nil }
        return (simulator.ledger.acceptedCount, simulator.ledger.duplicates.count)
    }

    /// The rig's own statements, on its connection (after ``setUp()``).
    var database: RigStore {
        get throws { RigStore(connection: try rigConnection(), logger: logger) }
    }

    /// The operator's statements (adding the app, a job's progress), on the rig's connection.
    var operatorStore: OperatorStore {
        get throws { OperatorStore(connection: try rigConnection(), logger: logger) }
    }

    private func rigConnection() throws -> PostgresConnection {
        guard let connection = lock.withLock({ self.connection }) else { throw EmbeddedError("not connected") }
        return connection
    }
}
