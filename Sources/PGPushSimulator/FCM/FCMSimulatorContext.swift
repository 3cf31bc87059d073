import Foundation
import NIOCore
import Synchronization

/// The answer to one FCM simulator stream.
struct FCMSimulatorResponse: Sendable {
    var status: Int
    /// JSON.
    var body: String
    /// What the statistics count it under: FcmError code, error status or OAuth error; `nil` for 200.
    var code: String?
    var retryAfterSeconds: Int?
    /// Adds `www-authenticate: Bearer …`, as Google does on a missing or bad access token.
    var bearerChallenge = false
    /// Recorded in the ledger when (and only if) the response is written.
    var ledgerEntry: FCMSimulatorLedgerEntry?

    static func error(_ error: FCMSimulatorError) -> FCMSimulatorResponse {
        FCMSimulatorResponse(status: error.httpStatus, body: error.body, code: error.statisticsCode,
                             retryAfterSeconds: error.retryAfterSeconds)
    }

    /// An OAuth 2.0 error answer of the token endpoint (RFC 6749 §5.2).
    static func oauthError(_ error: String, _ description: String) -> FCMSimulatorResponse {
        FCMSimulatorResponse(
            status: 400,
            body: #"{"error":"# + FCMSimulatorJSON.quoted(error) + #","error_description":"#
                + FCMSimulatorJSON.quoted(description) + "}",
            code: error)
    }
}

/// State shared by every connection of one FCM simulator: configuration, run-time changes, issued access
/// tokens and the recorders.
final class FCMSimulatorContext: Sendable {
    struct Dynamic: Sendable {
        var registry: FCMSimulatorTokenRegistry
        var faults: FCMSimulatorFaults
    }

    /// An access token this simulator issued.
    struct IssuedToken: Sendable {
        var clientEmail: String
        var projectID: String
        var expiresAt: Date
    }

    private struct Live {
        var streamLimit: Int
        var transports: [ObjectIdentifier: SimulatorTransport] = [:]
    }

    let configuration: FCMSimulatorConfiguration
    let ledger: FCMSimulatorLedger
    let statistics = StatisticsRecorder<FCMSimulatorStatistics>()
    let counters = SimulatorRequestCounters()
    let dynamic: Mutex<Dynamic>
    /// Trusted accounts by client email.
    let accounts: [String: FCMSimulatorServiceAccount]
    /// Hosts an assertion's `aud` may name when no exact audience is configured.
    let audienceHosts: Set<String>
    private let issued = Mutex<[String: IssuedToken]>([:])
    private let live: Mutex<Live>
    private let messageCounter = Atomic<UInt64>(0)
    /// The bound port, for the canonical token URI.
    let boundPort = Atomic<Int>(0)

    init(configuration: FCMSimulatorConfiguration) {
        self.configuration = configuration
        self.ledger = FCMSimulatorLedger(ledgerFile: configuration.ledgerFile)
        self.dynamic = Mutex(Dynamic(registry: configuration.registry, faults: configuration.faults))
        var accounts: [String: FCMSimulatorServiceAccount] = [:]
        for account in configuration.serviceAccounts { accounts[account.clientEmail] = account }
        self.accounts = accounts
        var hosts: Set<String> = ["localhost", "127.0.0.1"]
        for name in configuration.certificateHostnames { hosts.insert(name.lowercased()) }
        let host = configuration.host.lowercased()
        if !["0.0.0.0", "::", "[::]", ""].contains(host) { hosts.insert(host) }
        self.audienceHosts = hosts
        self.live = Mutex(Live(streamLimit: max(0, configuration.maxConcurrentStreams)))
    }

    var snapshot: Dynamic { dynamic.withLock { $0 } }

    // MARK: Connections and the live stream limit

    /// Creates a connection's transport with the stream limit in force and registers it for limit changes,
    /// under one lock so that no connection misses a change.
    func registerConnection(_ make: (_ streamLimit: Int) -> SimulatorTransport) -> SimulatorTransport {
        let transport = live.withLock { live in
            let transport = make(live.streamLimit)
            live.transports[ObjectIdentifier(transport)] = transport
            return transport
        }
        let id = ObjectIdentifier(transport)
        transport.channel.closeFuture.whenComplete { [self] _ in
            _ = live.withLock { $0.transports.removeValue(forKey: id) }
        }
        return transport
    }

    /// Advertises a new SETTINGS_MAX_CONCURRENT_STREAMS on every open connection and to new ones.
    func updateStreamLimit(_ limit: Int) {
        let limit = max(0, limit)
        let transports = live.withLock { live in
            live.streamLimit = limit
            return Array(live.transports.values)
        }
        for transport in transports {
            transport.channel.eventLoop.execute { transport.advertise(limit: limit, flush: true) }
        }
    }

    var streamLimit: Int { live.withLock { $0.streamLimit } }

    // MARK: Access tokens

    /// Issues an access token for `account`, valid for the configured lifetime from `now`.
    func issueAccessToken(for account: FCMSimulatorServiceAccount, now: Date) -> (token: String, lifetimeSeconds: Int64) {
        let lifetime = max(1, configuration.accessTokenLifetime.components.seconds)
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8]()
        bytes.reserveCapacity(32)
        for _ in 0..<4 {
            withUnsafeBytes(of: generator.next() as UInt64) { bytes.append(contentsOf: $0) }
        }
        let token = "ya29.sim-" + Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let entry = IssuedToken(clientEmail: account.clientEmail, projectID: account.projectID,
                                expiresAt: now.addingTimeInterval(TimeInterval(lifetime)))
        issued.withLock { issued in
            // Forget long-expired tokens now and then, so a long run does not grow without bound.
            if issued.count >= 4096 && issued.count.isMultiple(of: 1024) {
                issued = issued.filter { $0.value.expiresAt > now.addingTimeInterval(-86_400) }
            }
            issued[token] = entry
        }
        statistics.update { $0.tokenExchanges[account.clientEmail, default: 0] += 1 }
        return (token, lifetime)
    }

    func lookUpAccessToken(_ token: String) -> IssuedToken? {
        issued.withLock { $0[token] }
    }

    /// A message id unique within this simulator, in FCM's shape (`0:<ms>%<hex>`).
    func nextMessageID(now: Date) -> String {
        let number = messageCounter.add(1, ordering: .relaxed).newValue
        let millis = Int64(now.timeIntervalSince1970 * 1000)
        return "0:\(millis)%" + String(number, radix: 16).leftPadded(to: 16)
    }
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}
