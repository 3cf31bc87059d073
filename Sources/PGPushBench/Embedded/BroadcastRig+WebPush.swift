import Crypto
import Foundation
import PGPushCore
import PGPushDevelopment
import PGPushSimulator

/// The rig's Web Push side: a push service on loopback (the Web Push simulator in-process, or the nginx stand-in),
/// the app's VAPID key, and subscriptions registered in bulk.
extension BroadcastRig {
    /// The `sub` of the app's VAPID tokens (a subject Apple would take: a real domain, no spaces or brackets).
    static let vapidSubject = "mailto:ops@example.com"
    /// The host of the subscriptions' endpoints: a name (the simulators' certificate names it), on loopback.
    static let webEndpointHost = "localhost"
    /// Web subscriptions per registration statement on the direct path (about 160 bytes each).
    static let webBatchSize = 50_000

    /// The push service, the app's fresh VAPID key and what the workers need to reach the service. With nginx
    /// standing in (`nginxCAFile`), the subscriptions' endpoints are on nginx, which answers every POST 200;
    /// otherwise a Web Push simulator runs in this process, sharing the APNs simulator's CA, and decrypts and
    /// ledgers every message.
    func setUpWeb(nginxCAFile: String?) async throws {
        guard configuration.externalSimulator == nil else {
            throw EmbeddedError("web subscriptions need the in-process simulators; drop --simulator-endpoint")
        }
        let key = VAPIDKey.generate()
        let keyPath = "\(directory)/vapid.pem"
        guard FileManager.default.createFile(
            atPath: keyPath, contents: Data(key.privateKeyPEM.utf8), attributes: [.posixPermissions: 0o600])
        else { throw EmbeddedError("cannot write the VAPID key to \(keyPath)") }

        var state = WebState(key: key)
        if let nginxCAFile, let nginx {
            state.origin = "https://\(Self.webEndpointHost):\(nginx.port)"
            state.caFile = nginxCAFile
        } else {
            var webConfiguration = WebPushSimulatorConfiguration()
            webConfiguration.certificateDirectory = "\(directory)/simulator"
            webConfiguration.endpointHost = Self.webEndpointHost
            webConfiguration.faults.latency = configuration.simulatorLatency
            // As the FCM simulator: enough streams that one connection never bounds a run without latency.
            webConfiguration.maxConcurrentStreams = 1000
            var simulatorLogger = configuration.logger
            simulatorLogger.logLevel = .warning
            let simulator = WebPushSimulator(configuration: webConfiguration, logger: simulatorLogger)
            state.simulator = simulator
            lock.withLock { webState.simulator = simulator }
            try await simulator.start()
            guard let origin = simulator.origin else { throw EmbeddedError("the Web Push simulator has no origin") }
            state.origin = origin.serialized
            state.caFile = simulator.caCertificatePath
        }
        try await database.setVAPIDKey(
            appID: appID, privateKeyPath: keyPath, publicKey: key.applicationServerKey, subject: Self.vapidSubject)
        lock.withLock { webState = state }
    }

    /// Registers the devices' web subscriptions: made by the simulator (live, then half 404 and half 410 of the
    /// dead ones), the first ``Devices/webThroughAPI`` through `push.register_device` and the rest inserted
    /// directly, ``webBatchSize`` a statement. With nginx standing in, the database makes them in one statement
    /// (``RigStore/insertSyntheticWebSubscriptions(appID:origin:count:keys:)``): nothing reads their keys.
    func registerWebSubscriptions(_ devices: Devices) async throws {
        let state = lock.withLock { webState }
        guard let origin = state.origin, let key = state.key else { throw EmbeddedError("the rig has no Web Push (withWeb)") }
        let database = try database
        guard let simulator = state.simulator else {
            try await database.insertSyntheticWebSubscriptions(
                appID: appID, origin: origin, count: devices.web + devices.webDead, keys: Self.syntheticKeys(64))
            return
        }
        let notFound = devices.webDead / 2
        var made = try await Self.makeSubscriptions(on: simulator, count: devices.web, key: key.applicationServerKey, outcome: .live)
        made += try await Self.makeSubscriptions(on: simulator, count: notFound, key: key.applicationServerKey, outcome: .notFound)
        made += try await Self.makeSubscriptions(
            on: simulator, count: devices.webDead - notFound, key: key.applicationServerKey, outcome: .gone)
        let throughAPI = min(max(devices.webThroughAPI, 0), made.count)
        try await database.registerWebSubscriptions(appID: appID, subscriptionJSON: made[..<throughAPI].map(\.json))
        var start = throughAPI
        while start < made.count {
            let batch = made[start..<min(start + Self.webBatchSize, made.count)]
            try await database.insertWebSubscriptions(
                appID: appID, endpoints: batch.map(\.endpoint), p256dh: batch.map(\.subscription.keys.p256dhBase64URL),
                auth: batch.map(\.subscription.keys.authBase64URL))
            start += batch.count
        }
    }

    /// `count` subscriptions made on `simulator`, spread over the cores (a key pair each, about 0.1 ms).
    static func makeSubscriptions(
        on simulator: WebPushSimulator, count: Int, key: String, outcome: WebPushSimulatorRegistry.Outcome
    ) async throws -> [WebPushSimulatorSubscription] {
        guard count > 0 else { return [] }
        let parts = max(1, min(ProcessInfo.processInfo.activeProcessorCount, count / 1000))
        return try await withThrowingTaskGroup(of: (Int, [WebPushSimulatorSubscription]).self) { group in
            for part in 0..<parts {
                let share = count / parts + (part < count % parts ? 1 : 0)
                group.addTask {
                    (part, try simulator.makeSubscriptions(count: share, applicationServerKey: key, outcome: outcome))
                }
            }
            var parts: [(Int, [WebPushSimulatorSubscription])] = []
            for try await made in group { parts.append(made) }
            return parts.sorted { $0.0 < $1.0 }.flatMap(\.1)
        }
    }

    /// `count` browser-like key pairs' public halves and auth secrets (base64url), for subscriptions nothing
    /// decrypts.
    static func syntheticKeys(_ count: Int) -> [(p256dh: String, auth: String)] {
        (0..<count).map { _ in
            let p256dh = WebPushBase64URL.encode(P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
            let auth = SymmetricKey(size: .bits128).withUnsafeBytes { WebPushBase64URL.encode(Array($0)) }
            return (p256dh, auth)
        }
    }

    /// The Web Push simulator's ledger: accepted messages (and over which HTTP version), and subscriptions that
    /// accepted more than one; `nil` without it.
    var webLedger: WebLedger? {
        guard let simulator = webSimulator else { return nil }
        return WebLedger(
            accepted: simulator.ledger.acceptedCount, duplicates: simulator.ledger.duplicates.count,
            http2: simulator.ledger.acceptedCount(over: .http2), http1: simulator.ledger.acceptedCount(over: .http1_1))
    }
}

/// What the Web Push simulator accepted.
struct WebLedger: Sendable, Equatable {
    var accepted: Int
    var duplicates: Int
    /// Accepted over HTTP/2 and over HTTP/1.1.
    var http2: Int
    var http1: Int

    /// `HTTP/2` or `HTTP/1.1`, or both with their counts; `-` before anything was accepted.
    var httpVersions: String {
        switch (http2, http1) {
        case (0, 0): "-"
        case (_, 0): "HTTP/2"
        case (0, _): "HTTP/1.1"
        default: "HTTP/2 \(http2), HTTP/1.1 \(http1)"
        }
    }

    var json: [String: Any] { ["accepted": accepted, "duplicates": duplicates, "http2": http2, "http1_1": http1] }
}
