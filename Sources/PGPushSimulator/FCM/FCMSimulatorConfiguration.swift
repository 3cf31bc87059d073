import CryptoExtras
import Foundation
import NIOCore
import PGPushCore

/// Everything that shapes how the FCM simulator behaves. Every property has a default, so `init()` gives an
/// FCM-like server on an ephemeral loopback port; add at least one ``serviceAccounts`` entry for clients to
/// get access tokens.
///
/// One server answers both the OAuth token endpoint (``tokenPath``) and
/// `POST /v1/projects/{project_id}/messages:send`, so a service account whose `token_uri` is
/// `https://127.0.0.1:PORT/token` works against it unchanged.
public struct FCMSimulatorConfiguration: Sendable {
    /// The address to bind. Default `127.0.0.1`.
    public var host: String = "127.0.0.1"
    /// The port to bind; `0` picks a free one (read it from ``FCMSimulator/start()``). Default `0`.
    public var port: Int = 0
    /// Where `ca.pem`, `ca-key.pem`, `server.pem` and `server-key.pem` live; generated on the first start when
    /// absent. May be shared with an ``APNsSimulator`` (then one CA serves both). Default: a per-process
    /// directory under the system temporary directory.
    public var certificateDirectory: String = NSTemporaryDirectory() + "pgpush-simulator-\(getpid())"
    /// Regenerate the CA and server certificate on every start, even when they exist. Default `false`.
    public var regenerateCertificates: Bool = false
    /// DNS names the server certificate carries besides `localhost` (and 127.0.0.1). Token audiences naming
    /// one of them are accepted too (see ``tokenAudience``). Default empty.
    public var certificateHostnames: [String] = []
    /// The service accounts whose assertions the token endpoint accepts. Default empty.
    public var serviceAccounts: [FCMSimulatorServiceAccount] = []
    /// The path of the OAuth 2.0 token endpoint. Default `/token`.
    public var tokenPath: String = "/token"
    /// The `aud` an assertion must carry, compared as text (Google's is `https://oauth2.googleapis.com/token`).
    ///
    /// `nil` (the default) accepts any `https` URL whose path is ``tokenPath`` and whose host is one this
    /// server's certificate names (`localhost`, `127.0.0.1`, ``certificateHostnames``) or ``host``; the port is
    /// not compared, because a client may reach the simulator through a mapped port. The signature is always
    /// checked before the audience.
    public var tokenAudience: String? = nil
    /// How long an access token is valid; `expires_in` of the token answer. Default 3600 seconds.
    public var accessTokenLifetime: Duration = .seconds(3600)
    /// How far an assertion's `iat` may lie in the future. Default 60 seconds.
    public var assertionClockSkew: Duration = .seconds(60)
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised on every connection; change it at run time with
    /// ``FCMSimulator/updateStreamLimit(_:)``. Default 100 (Google publishes none; about 100 is common).
    public var maxConcurrentStreams: Int = 100
    /// Which registration tokens are dead, for another sender, invalid, or fail third-party auth.
    public var registry: FCMSimulatorTokenRegistry = .init()
    /// Injected failures; none by default.
    public var faults: FCMSimulatorFaults = .init()
    /// Record every message answered 200 (except `validate_only` ones) in ``FCMSimulator/ledger``. Default `true`.
    public var ledgerEnabled: Bool = true
    /// Keep each accepted message's JSON in the ledger; turn off for long benchmarks to save memory. Default `true`.
    public var ledgerKeepsMessages: Bool = true
    /// Also append each accepted message as a JSON line to this file. Default `nil`.
    public var ledgerFile: String? = nil
    /// Event-loop threads serving connections. Default: one per core.
    public var threadCount: Int = System.coreCount
    /// The wall clock used for assertion and access-token lifetimes; inject one to age tokens in tests.
    public var now: @Sendable () -> Date = { Date() }

    /// A configuration with every default.
    public init() {}
}

/// A service account the FCM simulator trusts: its client email (the assertion's `iss`), the project it may
/// send to, and the public half of its key.
public struct FCMSimulatorServiceAccount: Sendable {
    /// `client_email`: the `iss` of its assertions.
    public var clientEmail: String
    /// `project_id`: access tokens it obtains may send to `/v1/projects/{projectID}/messages:send` only.
    public var projectID: String
    /// Verifies its RS256 assertions.
    public var publicKey: _RSA.Signing.PublicKey
    /// `private_key_id`: when set, the assertion header's `kid` must equal it.
    public var privateKeyID: String?

    /// An account from its public key.
    public init(clientEmail: String, projectID: String, publicKey: _RSA.Signing.PublicKey, privateKeyID: String? = nil) {
        self.clientEmail = clientEmail
        self.projectID = projectID
        self.publicKey = publicKey
        self.privateKeyID = privateKeyID
    }

    /// An account from PEM text: the RSA private key (`BEGIN PRIVATE KEY` / `BEGIN RSA PRIVATE KEY`, as in a
    /// service-account file) or its public key (`BEGIN PUBLIC KEY`).
    public init(clientEmail: String, projectID: String, pem: String, privateKeyID: String? = nil) throws {
        let publicKey: _RSA.Signing.PublicKey
        if pem.contains("PRIVATE KEY") {
            publicKey = try _RSA.Signing.PrivateKey(pemRepresentation: pem).publicKey
        } else {
            publicKey = try _RSA.Signing.PublicKey(pemRepresentation: pem)
        }
        self.init(clientEmail: clientEmail, projectID: projectID, publicKey: publicKey, privateKeyID: privateKeyID)
    }

    /// The account a service-account file describes (its `token_uri` is not consulted; see
    /// ``FCMSimulatorConfiguration/tokenAudience``).
    public init(_ account: FCMServiceAccount) {
        self.init(clientEmail: account.clientEmail, projectID: account.projectID, publicKey: account.publicKey,
                  privateKeyID: account.privateKeyID)
    }
}

/// Which registration tokens the simulated FCM knows as dead, for another sender, invalid, or failing
/// third-party (APNs / web push) authentication.
///
/// Explicit sets serve in-process tests; the prefix rules let a separate process (`pgpush simulator`) and the
/// producer agree on outcomes without sharing state. Tokens are compared exactly (FCM tokens are
/// case-sensitive). Sets win over prefixes; the prefixes are checked in the order listed here.
public struct FCMSimulatorTokenRegistry: Sendable {
    /// Tokens answered `404 NOT_FOUND` / `UNREGISTERED`.
    public var unregistered: Set<String> = []
    /// Tokens answered `403 PERMISSION_DENIED` / `SENDER_ID_MISMATCH`.
    public var senderIDMismatch: Set<String> = []
    /// Tokens answered `400 INVALID_ARGUMENT` (field `message.token`).
    public var invalid: Set<String> = []
    /// Tokens answered `401 UNAUTHENTICATED` / `THIRD_PARTY_AUTH_ERROR`.
    public var thirdPartyAuthError: Set<String> = []
    /// Tokens starting with this are `UNREGISTERED`. Default `dead`.
    public var unregisteredPrefix: String? = "dead"
    /// Tokens starting with this are `SENDER_ID_MISMATCH`. Default `mismatch`.
    public var senderIDMismatchPrefix: String? = "mismatch"
    /// Tokens starting with this are not valid registration tokens. Default `invalid`.
    public var invalidPrefix: String? = "invalid"
    /// Tokens starting with this are `THIRD_PARTY_AUTH_ERROR`. Default `thirdparty`.
    public var thirdPartyAuthErrorPrefix: String? = "thirdparty"
    /// Projects for which every token not in ``validTokens`` is `SENDER_ID_MISMATCH`: the app's tokens
    /// belong to another Firebase project (a misconfigured app). Default empty.
    public var mismatchedProjects: Set<String> = []
    /// Tokens that are valid whatever the prefix rules and ``mismatchedProjects`` say.
    public var validTokens: Set<String> = []

    /// An empty registry with the default prefix rules.
    public init() {}

    /// What the registry says about a token sent through a project.
    public enum Outcome: Sendable, Hashable {
        case valid
        case unregistered
        case senderIDMismatch
        case invalid
        case thirdPartyAuthError
    }

    /// Looks a (well-formed) token up for a send to `projectID`.
    public func outcome(forToken token: String, projectID: String) -> Outcome {
        if unregistered.contains(token) { return .unregistered }
        if senderIDMismatch.contains(token) { return .senderIDMismatch }
        if invalid.contains(token) { return .invalid }
        if thirdPartyAuthError.contains(token) { return .thirdPartyAuthError }
        if validTokens.contains(token) { return .valid }
        func matches(_ prefix: String?) -> Bool {
            guard let prefix, !prefix.isEmpty else { return false }
            return token.hasPrefix(prefix)
        }
        if matches(unregisteredPrefix) { return .unregistered }
        if matches(senderIDMismatchPrefix) { return .senderIDMismatch }
        if matches(invalidPrefix) { return .invalid }
        if matches(thirdPartyAuthErrorPrefix) { return .thirdPartyAuthError }
        if mismatchedProjects.contains(projectID) { return .senderIDMismatch }
        return .valid
    }
}

/// Injected failures of the FCM simulator. Per-request choices derive from ``seed``, the message's token and
/// how many requests that token has had, so the same seed and the same requests per token give the same
/// outcomes whatever the interleaving. They apply to `messages:send` requests that passed authentication,
/// validation and the registry; the connection-level faults count every request (token exchanges too).
public struct FCMSimulatorFaults: Sendable {
    /// Seed of every random choice. Default 1.
    public var seed: UInt64 = 1
    /// Fraction of send requests answered `429 RESOURCE_EXHAUSTED` / `QUOTA_EXCEEDED`. Default 0.
    public var quotaExceededRate: Double = 0
    /// The `Retry-After` (seconds) of those 429s; `nil` sends none. Default 1 (Firebase does not say
    /// whether every 429 carries one, and advises waiting at least a minute for project quota).
    public var quotaExceededRetryAfterSeconds: Int? = 1
    /// Fraction of send requests answered `503 UNAVAILABLE`. Default 0.
    public var unavailableRate: Double = 0
    /// The `Retry-After` (seconds) of those 503s; `nil` (the default) sends none.
    public var unavailableRetryAfterSeconds: Int? = nil
    /// Fraction of send requests answered `500 INTERNAL`. Default 0.
    public var internalErrorRate: Double = 0
    /// Send a GOAWAY when the server's request count reaches a multiple of N. Default `nil` (never).
    public var goAwayEveryStreams: Int? = nil
    /// How the GOAWAY fault treats streams in flight. Default ``SimulatorFaults/GoAwayMode/noError``.
    public var goAwayMode: SimulatorFaults.GoAwayMode = .noError
    /// The GOAWAY debug data in abort mode. Default empty.
    public var goAwayDebugData: String = ""
    /// Close the TCP connection abruptly (unanswered) when the server's request count reaches a multiple of N.
    /// Default `nil`.
    public var resetEveryStreams: Int? = nil
    /// Delay before each answer. Default ``SimulatorLatency/none``.
    public var latency: SimulatorLatency = .none

    /// No faults.
    public init() {}

    var needsAttemptCounting: Bool { quotaExceededRate > 0 || unavailableRate > 0 || internalErrorRate > 0 }

    var connectionFaults: SimulatorConnectionFaults {
        SimulatorConnectionFaults(goAwayEveryStreams: goAwayEveryStreams, goAwayMode: goAwayMode,
                                  goAwayDebugData: goAwayDebugData, resetEveryStreams: resetEveryStreams)
    }
}
