import Crypto
import Foundation
import NIOCore

/// Everything that shapes how the simulator behaves. Every property has a default, so `init()` gives an
/// APNs-like server on an ephemeral loopback port that accepts any topic.
public struct APNsSimulatorConfiguration: Sendable {
    /// The address to bind. Default `127.0.0.1`.
    public var host: String = "127.0.0.1"
    /// The port to bind; `0` picks a free one (read it from ``APNsSimulator/start()``). Default `0`.
    public var port: Int = 0
    /// The port of the broadcast channel management API (APNs serves it on its own host, port 2195 or 2196):
    /// same certificate and authentication as ``port``. `0` picks a free one (read it from
    /// ``APNsSimulator/channelsPort`` after start); `nil` does not serve it. Default `0`.
    public var channelsPort: Int? = 0
    /// Channels one bundle id may have at once; creating one more is `400 CannotCreateChannelConfig`.
    /// APNs' limit is 10,000 per app and environment. Default 10,000.
    public var channelLimit: Int = 10_000
    /// Where `ca.pem`, `ca-key.pem`, `server.pem` and `server-key.pem` live. They are generated on the first
    /// start when absent. Default: a per-process directory under the system temporary directory.
    public var certificateDirectory: String = NSTemporaryDirectory() + "pgpush-simulator-\(getpid())"
    /// Regenerate the CA and server certificate on every start, even when they exist. Default `false`.
    public var regenerateCertificates: Bool = false
    /// DNS names the server certificate carries besides `localhost` (and 127.0.0.1), e.g. a compose service
    /// name. Existing certificates that lack one are regenerated. Default empty.
    public var certificateHostnames: [String] = []
    /// The provider-token keys the simulator knows; a JWT signed by any other key is `InvalidProviderToken`.
    public var tokenKeys: [SimulatorTokenKey] = []
    /// When set, TLS client certificates signed by this CA (PEM file) are accepted: certificate authentication.
    /// Connections without a client certificate still use provider tokens. Default `nil`.
    public var clientCertificateCAFile: String? = nil
    /// Topics a certificate-authenticated connection may push to; empty means any topic. Default empty.
    public var certificateTopics: [String] = []
    /// Topics accepted on token-authenticated connections; `nil` accepts any. Default `nil`.
    public var allowedTopics: Set<String>? = nil
    /// Exact topics refused with `400 TopicDisallowed` whatever the authentication, e.g. `com.example.app.voip`
    /// for a credential that does not cover VoIP. Default empty.
    public var disallowedTopics: Set<String> = []
    /// Which device tokens are dead, malformed or registered for another topic.
    public var registry: SimulatorTokenRegistry = .init()
    /// Injected failures; none by default.
    public var faults: SimulatorFaults = .init()
    /// Record every accepted notification in ``APNsSimulator/ledger``. Default `true`.
    public var ledgerEnabled: Bool = true
    /// Keep each accepted notification's payload, as received, in the ledger
    /// (``SimulatorLedgerEntry/payload``, and a `payload` field in ``ledgerFile`` lines), so tests can check
    /// what each device got. Off by default: benchmarks keep millions of entries, and with it off an entry
    /// holds only the payload's SHA-256. Default `false`.
    public var ledgerKeepsPayloads: Bool = false
    /// Also append each accepted notification as a JSON line to this file. Default `nil`.
    public var ledgerFile: String? = nil
    /// SETTINGS_MAX_CONCURRENT_STREAMS on a token-auth connection until its first successful request. Default 1.
    public var streamsBeforeAuth: Int = 1
    /// SETTINGS_MAX_CONCURRENT_STREAMS after that, and from the start on certificate-auth connections. Default 1000.
    public var streamsAfterAuth: Int = 1000
    /// A new provider token for the same team and key sooner than this after the previous new one is answered
    /// `429 TooManyProviderTokenUpdates`. Default 20 minutes.
    public var providerTokenMinimumRefreshInterval: Duration = .seconds(20 * 60)
    /// A provider token whose `iat` is older than this is `403 ExpiredProviderToken`. Default 1 hour.
    public var providerTokenMaximumAge: Duration = .seconds(3600)
    /// Event-loop threads serving connections. Default: one per core.
    public var threadCount: Int = System.coreCount
    /// The wall clock used for token ages and 410 timestamps; inject one to age tokens in tests.
    public var now: @Sendable () -> Date = { Date() }

    /// A configuration with every default.
    public init() {}
}

/// A provider-token signing key the simulator trusts: team id, key id and the P-256 public key.
public struct SimulatorTokenKey: Sendable {
    /// The 10-character team id expected in the JWT `iss` claim.
    public var teamID: String
    /// The 10-character key id expected in the JWT header `kid`.
    public var keyID: String
    /// The public half of the `.p8` key.
    public var publicKey: P256.Signing.PublicKey

    /// A key from a public key.
    public init(teamID: String, keyID: String, publicKey: P256.Signing.PublicKey) {
        self.teamID = teamID
        self.keyID = keyID
        self.publicKey = publicKey
    }

    /// A key from PEM text: either the `.p8` private key (`BEGIN PRIVATE KEY` / `BEGIN EC PRIVATE KEY`) or a
    /// public key (`BEGIN PUBLIC KEY`).
    public init(teamID: String, keyID: String, pem: String) throws {
        let publicKey: P256.Signing.PublicKey
        if pem.contains("PRIVATE KEY") {
            publicKey = try P256.Signing.PrivateKey(pemRepresentation: pem).publicKey
        } else {
            publicKey = try P256.Signing.PublicKey(pemRepresentation: pem)
        }
        self.init(teamID: teamID, keyID: keyID, publicKey: publicKey)
    }
}

/// Response delay injected before each answer.
public enum SimulatorLatency: Sendable, Hashable {
    /// Answer as soon as the request is complete.
    case none
    /// Always wait this long.
    case fixed(Duration)
    /// Wait a duration drawn uniformly (from the fault seed) between the two bounds.
    case uniform(Duration, Duration)

    /// The latency a `--latency-ms` flag gives: `N` or `MIN-MAX` milliseconds, `0` for none; nil for anything
    /// else (a negative number, a minimum above the maximum, not a number).
    public init?(milliseconds text: String) {
        let bounds = text.split(separator: "-", omittingEmptySubsequences: false).map { Int($0.trimmingCharacters(in: .whitespaces)) }
        switch bounds.count {
        case 1 where bounds[0] != nil:
            self = bounds[0]! == 0 ? .none : .fixed(.milliseconds(bounds[0]!))
        case 2 where bounds[0] != nil && bounds[1] != nil && bounds[0]! <= bounds[1]!:
            self = .uniform(.milliseconds(bounds[0]!), .milliseconds(bounds[1]!))
        default:
            return nil
        }
    }
}
