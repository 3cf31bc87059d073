import Foundation
import Logging
import NIOCore
import PGPushTransport
import PGPushCore
import PGPushStore
import Synchronization

/// One connection pool per app and provider, built on first use from the app's `push.apps` row. A credential that cannot
/// be used (outside the credentials directory, unreadable, not a key) pauses the app with a reason that names
/// the column and the problem, never the file's contents.
public actor AppRegistry {
    private let configuration: WorkerConfiguration
    private let store: QueueStore
    private let logger: Logger
    private let resolver: CredentialResolver
    private var apps: [String: AppRecord] = [:]
    private var senders: [SenderKey: AppSender] = [:]
    private let pools: PoolSupervisor
    private var tokenSources: [String: SharedProviderTokenSource] = [:]
    private var accessTokenSources: [String: SharedFCMAccessTokenSource] = [:]
    /// FCM's quota is the Firebase project's, not the app's: apps sharing a project share one limiter.
    private var projectQuotas: [String: RateLimiter] = [:]
    private var liveWorkers = 1
    /// The worker's one Web Push client: connections per push-service origin, shared by every app. Made on first
    /// use, closed by ``shutdown()``.
    private var webPushClient: WebPushClient?
    /// VAPID tokens per (key, origin), shared by every app.
    // The defaults are valid, so this cannot throw.
    private let vapidTokens = try! VAPIDTokenCache()
    /// The senders, readable without entering the actor: the claim loop asks for throttles before every claim.
    private nonisolated let published = Mutex<[SenderKey: AppSender]>([:])

    init(configuration: WorkerConfiguration, store: QueueStore, pools: PoolSupervisor, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.pools = pools
        self.logger = logger
        self.resolver = CredentialResolver(directory: configuration.credentialsDirectory)
    }

    /// Re-reads the app rows (``update(apps:)``).
    public func reload() async throws {
        update(apps: try await store.apps())
    }

    /// Takes the app rows as just read: rate limits take effect without a restart; a changed credential
    /// location, topic or endpoint gets a new pool.
    public func update(apps fresh: [String: AppRecord]) {
        for (key, sender) in senders {
            guard let row = fresh[key.appID] else {
                retire(key)
                continue
            }
            if row.privateKeyPath != sender.app.privateKeyPath || row.certificatePath != sender.app.certificatePath
                || row.teamID != sender.app.teamID || row.keyID != sender.app.keyID
                || row.environment != sender.app.environment || row.topic != sender.app.topic
                || row.fcmProjectID != sender.app.fcmProjectID || row.fcmServiceAccountPath != sender.app.fcmServiceAccountPath
                || row.vapidPrivateKeyPath != sender.app.vapidPrivateKeyPath || row.vapidPublicKey != sender.app.vapidPublicKey
                || row.vapidSubject != sender.app.vapidSubject
                || (row.rateLimit == nil) != (sender.app.rateLimit == nil) {
                retire(key)
            } else {
                sender.rateLimiter?.update(fleetRatePerSecond: fleetRate(row), liveWorkers: liveWorkers)
            }
        }
        apps = fresh
    }

    /// Tells every rate limiter how many workers share the fleet's limits now.
    public func setLiveWorkers(_ count: Int) {
        liveWorkers = max(1, count)
        for sender in senders.values {
            sender.rateLimiter?.update(fleetRatePerSecond: fleetRate(sender.app), liveWorkers: liveWorkers)
        }
        for quota in projectQuotas.values {
            quota.update(fleetRatePerSecond: projectQuotaRate, liveWorkers: liveWorkers)
        }
    }

    /// Checks out the sender for an app, or returns `nil` when the app is unknown or its credential is
    /// unusable (the app is then paused with the reason). The caller checks it back in (``AppSender/checkIn()``)
    /// when done; a sender checked out is never closed as idle.
    public func checkOutSender(for appID: String, platform: DevicePlatform = .ios, role: SenderRole = .push) async -> AppSender? {
        // Broadcasts share the device pushes' connections unless they are sent elsewhere.
        let role = role == .broadcasts && configuration.apnsBroadcastEndpointOverride == nil ? .push : role
        let key = SenderKey(appID: appID, platform: platform, role: role)
        if let sender = senders[key] {
            sender.usage.checkOut()
            return sender
        }
        // Out of line: every chunk's task allocates this function's frame, and the first use's reload, pool
        // and error paths would make it several kilobytes.
        return await checkOutNewSender(key)
    }

    @inline(never)
    private func checkOutNewSender(_ key: SenderKey) async -> AppSender? {
        let (appID, platform, role) = (key.appID, key.platform, key.role)
        if apps[appID] == nil { try? await reload() }
        // The reload suspended this actor: a concurrent first use may have built the pool meanwhile, and one
        // app gets one pool per provider.
        if let sender = senders[key] {
            sender.usage.checkOut()
            return sender
        }
        guard let app = apps[appID] else { return nil }
        do {
            let sender = switch platform {
            case .ios: try makeSender(app, role: role)
            case .android: try makeFCMSender(app)
            case .web: try makeWebPushSender(app)
            }
            sender.usage.checkOut()
            senders[key] = sender
            publish()
            pools.start(sender.pool, name: key.poolName)
            return sender
        } catch {
            let reason = "credential: \(error.description)"
            if platform == .web {
                // The app's VAPID key says nothing of its APNs or FCM credentials: only its Web Push waits.
                logger.error("pausing the app's Web Push: its VAPID key cannot be used", metadata: ["app": "\(appID)", "reason": "\(reason)"])
                _ = try? await store.pauseWebPush(appID, reason: reason)
            } else {
                logger.error("pausing app: its credential cannot be used", metadata: ["app": "\(appID)", "reason": "\(reason)"])
                _ = try? await store.pauseApp(appID, reason: reason)
            }
            return nil
        }
    }

    /// Closes the pools of apps nothing was sent for in `timeout`; returns their ids. The next chunk of such
    /// an app opens a new pool.
    @discardableResult
    public func closeIdlePools(idleFor timeout: Duration, now: ContinuousClock.Instant = .now) -> [String] {
        let idle = senders.filter { $0.value.usage.isIdle(for: timeout, now: now) }.map(\.key)
        for key in idle {
            retire(key)
            logger.info("closed the connections of an idle app", metadata: ["app": "\(key.appID)", "platform": "\(key.platform.rawValue)"])
        }
        return idle.map(\.appID)
    }

    /// How fast each app with a sender can send right now: its rate-limit share and its 429/503 backoff. An
    /// app with both providers can send at the sum of their rates (unlimited if either is), and is held back
    /// by the tighter backoff. FCM's project quota alone does not count as a throttle: it is far above what
    /// one claim takes.
    public nonisolated func throttles() -> [String: AppThrottle] {
        published.withLock { senders in
            var byApp: [String: [AppThrottle]] = [:]
            for (key, sender) in senders where key.role == .push {
                let rate = sender.app.rateLimit == nil ? nil : sender.rateLimiter?.sharePerSecond
                byApp[key.appID, default: []].append(AppThrottle(ratePerSecond: rate, backoffConcurrency: sender.gate.backoffLimit))
            }
            var throttles: [String: AppThrottle] = [:]
            for (id, providers) in byApp {
                let rates = providers.map(\.ratePerSecond)
                let rate: Double? = rates.contains { $0 == nil } ? nil : rates.compactMap { $0 }.reduce(0, +)
                let backoff = providers.compactMap(\.backoffConcurrency).min()
                let throttle = AppThrottle(ratePerSecond: rate, backoffConcurrency: backoff)
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
    public func activePools() -> [(appID: String, provider: String, pool: any PushConnectionPool)] {
        senders.map { ($0.key.appID, $0.key.providerLabel, $0.value.pool) }
    }

    private func retire(_ key: SenderKey) {
        pools.retire(key.poolName)
        senders.removeValue(forKey: key)
        publish()
    }

    /// An app's `rate_limit`, which applies to each provider.
    private func fleetRate(_ app: AppRecord) -> Double {
        app.rateLimit.map(Double.init) ?? .infinity
    }

    /// FCM's quota a second for one Firebase project (600,000 messages a minute by default), for the fleet.
    private var projectQuotaRate: Double { Double(configuration.fcmQuotaPerMinute) / 60 }

    /// The limiter every FCM sender of `projectID` in this worker shares; the fleet's workers divide the quota
    /// as they divide a rate limit.
    private func projectQuota(_ projectID: String) -> RateLimiter {
        if let quota = projectQuotas[projectID] { return quota }
        let quota = RateLimiter(fleetRatePerSecond: projectQuotaRate, liveWorkers: liveWorkers)
        projectQuotas[projectID] = quota
        return quota
    }

    /// The pool settings both providers share: the endpoint, the CA trusted besides the system's, the
    /// connections per app and the request deadline. `endpoint` is an override from `flag`, else `standard`.
    private func clientConfiguration(
        override: String?, flag: String, standard: ProviderEndpoint, caFile: String?
    ) throws(PGPushError) -> HTTP2ClientConfiguration {
        var client = HTTP2ClientConfiguration()
        if let override {
            do {
                client.endpoint = try ProviderEndpoint(url: override)
            } catch {
                throw PGPushError(.invalidConfiguration, "\(flag) \(override) is not a valid https URL")
            }
        } else {
            client.endpoint = standard
        }
        client.additionalTrustRootsPEMFile = caFile
        client.proxy = configuration.httpsProxy
        client.connectionsPerPool = configuration.connectionsPerApp
        client.requestTimeout = configuration.requestTimeout
        client.http2Engine = configuration.http2Engine
        return client
    }

    /// A sender around a new pool, limited by the app's `rate_limit` if it has one (each provider gets its own
    /// share); `provider` names it in the pool's log lines and in the error a TLS setup failure gives.
    private func sender(
        _ app: AppRecord, _ platform: DevicePlatform, client: HTTP2ClientConfiguration, credentials: ProviderCredentials,
        projectQuota: RateLimiter? = nil, fcmTokens: SharedFCMAccessTokenSource?, provider: any HTTP2ProviderRules
    ) throws(PGPushError) -> AppSender {
        var client = client
        client.provider = provider
        let pool: HTTP2ConnectionPool
        do {
            pool = try HTTP2ConnectionPool(configuration: client, credentials: credentials, logger: logger)
        } catch let error as PGPushError {
            throw error
        } catch {
            throw PGPushError(.invalidConfiguration, "TLS setup failed for the app's \(provider) connection pool")
        }
        let gate = ConcurrencyGate(maximum: min(configuration.inFlightPerApp, configuration.connectionsPerApp * client.maximumStreamsPerConnectionCap))
        let rateLimiter = app.rateLimit.map { RateLimiter(fleetRatePerSecond: Double($0), liveWorkers: liveWorkers) }
        return AppSender(app: app, platform: platform, pool: pool, rateLimiter: rateLimiter, projectQuota: projectQuota, gate: gate,
                         fcmTokens: fcmTokens)
    }

    private func makeSender(_ app: AppRecord, role: SenderRole) throws(PGPushError) -> AppSender {
        let environment = APNsEnvironment(rawValue: app.environment) ?? .production
        var client = switch role {
        case .push:
            try clientConfiguration(
                override: configuration.apnsEndpointOverride, flag: "--apns-endpoint",
                standard: .apple(environment), caFile: configuration.apnsCAFile)
        case .channels:
            try clientConfiguration(
                override: configuration.apnsChannelsEndpointOverride, flag: "--apns-channels-endpoint",
                standard: .appleChannelManagement(environment), caFile: configuration.apnsCAFile)
        case .broadcasts:
            try clientConfiguration(
                override: configuration.apnsBroadcastEndpointOverride ?? configuration.apnsEndpointOverride,
                flag: configuration.apnsBroadcastEndpointOverride == nil ? "--apns-endpoint" : "--apns-broadcast-endpoint",
                standard: .apple(environment), caFile: configuration.apnsCAFile)
        }

        let credentials: ProviderCredentials
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

        if role == .channels {
            // An `all-channels` list of 10,000 ids is about 300 KB.
            client.maximumResponseBodyBytes = 1 << 20
        }
        let provider = switch role {
        case .push: APNsRules(.push)
        case .channels: APNsRules(.channelManagement)
        case .broadcasts: APNsRules(.broadcast)
        }
        return try sender(app, .ios, client: client, credentials: credentials, fcmTokens: nil, provider: provider)
    }

    /// The FCM sender of an app: its service account read from `fcm_service_account_path` (never logged), an
    /// access token shared by the fleet, and a pool to FCM (or `--fcm-endpoint`).
    private func makeFCMSender(_ app: AppRecord) throws(PGPushError) -> AppSender {
        guard let path = app.fcmServiceAccountPath, let projectID = app.fcmProjectID else {
            throw PGPushError(.invalidConfiguration, "app has no FCM credentials")
        }
        let json = try resolver.read(path, column: "fcm_service_account_path")
        let account: FCMServiceAccount
        do {
            account = try FCMServiceAccount(json: Array(json.utf8))
        } catch {
            throw PGPushError(.invalidCredential, "fcm_service_account_path \(path) is not a usable service-account file: \(error.message)")
        }
        var client = try clientConfiguration(
            override: configuration.fcmEndpointOverride, flag: "--fcm-endpoint", standard: Self.fcmEndpoint,
            caFile: configuration.fcmCAFile)
        client.maximumResponseBodyBytes = 16_384

        let sourceKey = "\(account.clientEmail):\(account.privateKeyID)"
        let source = accessTokenSources[sourceKey] ?? SharedFCMAccessTokenSource(
            account: account, exchange: FCMTokenExchange(additionalTrustRootsPEMFile: configuration.fcmCAFile, proxy: configuration.httpsProxy),
            store: store, logger: logger)
        accessTokenSources[sourceKey] = source
        return try sender(app, .android, client: client, credentials: .bearer(source), projectQuota: projectQuota(projectID),
                          fcmTokens: source, provider: FCMRules(.send))
    }

    private static let fcmEndpoint = ProviderEndpoint(host: "fcm.googleapis.com")

    /// The Web Push sender of an app: its VAPID key read from `vapid_private_key_path` (never logged), checked
    /// against the `vapid_public_key` its subscriptions were made with, and the worker's shared client.
    private func makeWebPushSender(_ app: AppRecord) throws(PGPushError) -> AppSender {
        guard let path = app.vapidPrivateKeyPath, let publicKey = app.vapidPublicKey, let subjectText = app.vapidSubject else {
            throw PGPushError(.invalidConfiguration, "app has no Web Push configured")
        }
        let pem = try resolver.read(path, column: "vapid_private_key_path")
        let key: VAPIDKey
        do {
            key = try VAPIDKey(pemRepresentation: pem)
        } catch {
            throw PGPushError(.invalidCredential, "vapid_private_key_path \(path) is not a usable P-256 private key")
        }
        guard key.applicationServerKey == publicKey else {
            throw PGPushError(.invalidCredential, "\(WebPushRefusal.keyMismatch)")
        }
        let subject: VAPIDSubject
        do {
            subject = try VAPIDSubject(subjectText)
        } catch {
            throw PGPushError(.invalidConfiguration, "vapid_subject: \(error.message)")
        }
        let pool = WebPushPool(client: try sharedWebPushClient(), signer: VAPIDSigner(key: key, subject: subject))
        let gate = ConcurrencyGate(maximum: configuration.inFlightPerApp)
        let rateLimiter = app.rateLimit.map { RateLimiter(fleetRatePerSecond: Double($0), liveWorkers: liveWorkers) }
        return AppSender(app: app, platform: .web, pool: pool, rateLimiter: rateLimiter, projectQuota: nil, gate: gate, fcmTokens: nil)
    }

    private func sharedWebPushClient() throws(PGPushError) -> WebPushClient {
        if let webPushClient { return webPushClient }
        let origins: WebPushOrigins
        do {
            origins = try WebPushOrigins(allowing: configuration.webPushAllowedOrigins)
        } catch {
            throw PGPushError(.invalidConfiguration, "--web-push-allow-origin: \(error.message)")
        }
        let client = try WebPushClient(
            configuration: WebPushClientConfiguration(
                allowedOrigins: origins, caFile: configuration.webPushCAFile, requestTimeout: configuration.requestTimeout,
                http2Engine: configuration.http2Engine),
            tokens: vapidTokens, logger: logger)
        webPushClient = client
        return client
    }

    /// Closes the shared Web Push client's connections.
    public func shutdown() async {
        await webPushClient?.shutdown()
        webPushClient = nil
    }
}
