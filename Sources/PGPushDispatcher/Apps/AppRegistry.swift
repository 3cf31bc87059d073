import Foundation
import Logging
import NIOCore
import PGPushAPNs
import PGPushCore
import PGPushStore
import Synchronization

/// One connection pool per app, built on first use from the app's `push.apps` row. A credential that cannot
/// be used (outside the credentials directory, unreadable, not a key) pauses the app with a reason that names
/// the column and the problem, never the file's contents.
public actor AppRegistry {
    private let configuration: WorkerConfiguration
    private let store: QueueStore
    private let logger: Logger
    private let resolver: CredentialResolver
    private var apps: [String: AppRecord] = [:]
    private var senders: [String: AppSender] = [:]
    private var poolTasks: [String: Task<Void, Never>] = [:]
    private var tokenSources: [String: SharedProviderTokenSource] = [:]
    private var liveWorkers = 1
    /// The senders, readable without entering the actor: the claim loop asks for throttles before every claim.
    private nonisolated let published = Mutex<[String: AppSender]>([:])

    public init(configuration: WorkerConfiguration, store: QueueStore, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.logger = logger
        self.resolver = CredentialResolver(directory: configuration.credentialsDirectory)
    }

    /// Re-reads the app rows: rate limits and pauses take effect without a restart; a changed credential
    /// location gets a new pool.
    public func reload() async throws {
        let fresh = try await store.apps()
        for (id, sender) in senders {
            guard let row = fresh[id] else {
                retire(id)
                continue
            }
            if row.privateKeyPath != sender.app.privateKeyPath || row.certificatePath != sender.app.certificatePath
                || row.teamID != sender.app.teamID || row.keyID != sender.app.keyID
                || row.environment != sender.app.environment || row.topic != sender.app.topic
                || (row.rateLimit == nil) != (sender.rateLimiter == nil) {
                retire(id)
            } else if let limit = row.rateLimit {
                sender.rateLimiter?.update(fleetRatePerSecond: Double(limit), liveWorkers: liveWorkers)
            }
        }
        apps = fresh
    }

    /// Tells every rate limiter how many workers share the fleet's limits now.
    public func setLiveWorkers(_ count: Int) {
        liveWorkers = max(1, count)
        for sender in senders.values {
            if let limit = sender.app.rateLimit {
                sender.rateLimiter?.update(fleetRatePerSecond: Double(limit), liveWorkers: liveWorkers)
            }
        }
    }

    /// Checks out the sender for an app, or returns `nil` when the app is unknown or its credential is
    /// unusable (the app is then paused with the reason). The caller checks it back in (``AppSender/checkIn()``)
    /// when done; a sender checked out is never closed as idle.
    func checkOutSender(for appID: String) async -> AppSender? {
        if let sender = senders[appID] {
            sender.usage.checkOut()
            return sender
        }
        if apps[appID] == nil { try? await reload() }
        // The reload suspended this actor: a concurrent first use may have built the pool meanwhile, and one
        // app gets one pool.
        if let sender = senders[appID] {
            sender.usage.checkOut()
            return sender
        }
        guard let app = apps[appID] else { return nil }
        do {
            let sender = try makeSender(app)
            sender.usage.checkOut()
            senders[appID] = sender
            publish()
            let pool = sender.pool
            poolTasks[appID] = Task {
                do {
                    try await pool.run()
                } catch {
                    self.logger.error("connection pool stopped", metadata: ["app": "\(appID)", "error": "\(LoggableError.describe(error))"])
                }
            }
            return sender
        } catch {
            let reason = "credential: \(error.description)"
            logger.error("pausing app: its credential cannot be used", metadata: ["app": "\(appID)", "reason": "\(reason)"])
            _ = try? await store.pauseApp(appID, reason: reason)
            return nil
        }
    }

    /// Closes the pools of apps nothing was sent for in `timeout`; returns their ids. The next chunk of such
    /// an app opens a new pool.
    @discardableResult
    public func closeIdlePools(idleFor timeout: Duration, now: ContinuousClock.Instant = .now) -> [String] {
        let idle = senders.filter { $0.value.usage.isIdle(for: timeout, now: now) }.map(\.key)
        for appID in idle {
            retire(appID)
            logger.info("closed the connections of an idle app", metadata: ["app": "\(appID)"])
        }
        return idle
    }

    /// How fast each app with a sender can send right now: its rate-limit share and its 429/503 backoff.
    public nonisolated func throttles() -> [String: AppThrottle] {
        published.withLock { senders in
            var throttles: [String: AppThrottle] = [:]
            for (id, sender) in senders {
                let throttle = AppThrottle(ratePerSecond: sender.rateLimiter?.sharePerSecond, backoffConcurrency: sender.gate.backoffLimit)
                if throttle.isThrottled { throttles[id] = throttle }
            }
            return throttles
        }
    }

    private func publish() {
        let current = senders
        published.withLock { $0 = current }
    }

    /// Every pool this worker runs, for metrics.
    public func activePools() -> [(appID: String, pool: APNsConnectionPool)] {
        senders.map { ($0.key, $0.value.pool) }
    }

    /// Stops every pool (their in-flight requests have been drained by then).
    public func shutdown() async {
        let tasks = poolTasks.values
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        poolTasks = [:]
        senders = [:]
        publish()
    }

    private func retire(_ appID: String) {
        poolTasks.removeValue(forKey: appID)?.cancel()
        senders.removeValue(forKey: appID)
        publish()
    }

    private func makeSender(_ app: AppRecord) throws(PGPushError) -> AppSender {
        var client = APNsClientConfiguration()
        if let override = configuration.apnsEndpointOverride {
            do {
                client.endpoint = try APNsEndpoint(url: override)
            } catch {
                throw PGPushError(.invalidConfiguration, "--apns-endpoint \(override) is not a valid https URL")
            }
        } else {
            client.endpoint = .apple(APNsEnvironment(rawValue: app.environment) ?? .production)
        }
        client.additionalTrustRootsPEMFile = configuration.apnsCAFile
        client.connectionsPerPool = configuration.connectionsPerApp
        client.requestTimeout = configuration.requestTimeout

        let credentials: APNsCredentials
        if let keyPath = app.privateKeyPath, let teamID = app.teamID, let keyID = app.keyID {
            let pem = try resolver.read(keyPath, column: "private_key_path")
            let signer: ProviderTokenSigner
            do {
                signer = try ProviderTokenSigner(teamID: teamID, keyID: keyID, privateKeyPEM: pem)
            } catch {
                throw PGPushError(.invalidCredential, "private_key_path \(keyPath) is not a usable P-256 .p8 key")
            }
            let sourceKey = "\(teamID):\(keyID)"
            let source = tokenSources[sourceKey] ?? SharedProviderTokenSource(
                signer: signer, store: store, policy: configuration.providerTokenPolicy, logger: logger)
            tokenSources[sourceKey] = source
            credentials = .token(source)
        } else if let certificatePath = app.certificatePath {
            let resolved = try resolver.resolve(certificatePath, column: "certificate_path")
            var passphrase: String?
            if let variable = app.certificatePasswordEnv {
                guard let value = ProcessInfo.processInfo.environment[variable] else {
                    throw PGPushError(.credentialUnreadable, "certificate_password_env \(variable) is not set in the worker's environment")
                }
                passphrase = value
            }
            let certificate: APNsClientCertificate
            do {
                certificate = try APNsClientCertificate(file: resolved, passphrase: passphrase)
            } catch {
                throw PGPushError(.invalidCredential, "certificate_path \(certificatePath) is not a usable certificate and key (wrong format or passphrase)")
            }
            // APNs would refuse it in every handshake: say so now, with the date, instead of retrying.
            let expiresAt = certificate.expiresAt
            if expiresAt <= Date() {
                throw PGPushError(.invalidCredential, "certificate_path \(certificatePath) expired on \(expiresAt.formatted(.iso8601))")
            }
            if expiresAt.timeIntervalSinceNow < 30 * 86_400 {
                logger.warning("APNs client certificate expires soon", metadata: [
                    "app": "\(app.id)", "expires_at": "\(expiresAt.formatted(.iso8601))",
                ])
            }
            credentials = .certificate(certificate)
        } else {
            throw PGPushError(.invalidConfiguration, "app has neither a private key nor a certificate")
        }

        let pool: APNsConnectionPool
        do {
            pool = try APNsConnectionPool(configuration: client, credentials: credentials, logger: logger)
        } catch let error as PGPushError {
            throw error
        } catch {
            throw PGPushError(.invalidConfiguration, "TLS setup failed for the app's connection pool")
        }
        let limiter = app.rateLimit.map { RateLimiter(fleetRatePerSecond: Double($0), liveWorkers: liveWorkers) }
        let gate = ConcurrencyGate(maximum: min(configuration.inFlightPerApp, configuration.connectionsPerApp * client.maximumStreamsPerConnectionCap))
        return AppSender(app: app, pool: pool, rateLimiter: limiter, gate: gate)
    }
}
