import Foundation
import NIOCore

/// Everything that shapes how the Web Push simulator behaves. Every property has a default, so `init()` gives a
/// push service on an ephemeral loopback port that speaks HTTP/2 to clients offering `h2` in ALPN and
/// HTTP/1.1 to the others.
public struct WebPushSimulatorConfiguration: Sendable {
    /// The address to bind. Default `127.0.0.1`.
    public var host: String = "127.0.0.1"
    /// The port to bind; `0` picks a free one (read it from ``WebPushSimulator/start()``). Default `0`.
    public var port: Int = 0
    /// Serve HTTP/1.1 only: ALPN offers `http/1.1` and never `h2`, like a push-service origin without HTTP/2.
    /// Default `false` (ALPN offers `h2`, then `http/1.1`; a client offering neither gets HTTP/1.1).
    public var http1Only: Bool = false
    /// The host the subscriptions' endpoints name (`https://<endpointHost>:<port>/push/<id>`); it must be on
    /// the server certificate (`localhost`, `127.0.0.1`, ``certificateHostnames``). Default: ``host``, or
    /// `127.0.0.1` when that is a wildcard address.
    public var endpointHost: String? = nil
    /// Where `ca.pem`, `ca-key.pem`, `server.pem` and `server-key.pem` live; generated on the first start when
    /// absent. May be shared with the APNs and FCM simulators (then one CA serves all). Default: a per-process
    /// directory under the system temporary directory.
    public var certificateDirectory: String = NSTemporaryDirectory() + "pgpush-simulator-\(getpid())"
    /// Regenerate the CA and server certificate on every start, even when they exist. Default `false`.
    public var regenerateCertificates: Bool = false
    /// DNS names the server certificate carries besides `localhost` (and 127.0.0.1). Default empty.
    public var certificateHostnames: [String] = []
    /// SETTINGS_MAX_CONCURRENT_STREAMS of HTTP/2 connections. Default 100.
    public var maxConcurrentStreams: Int = 100
    /// The largest body accepted; larger ones are answered 413. Default 4096, what RFC 8291 asks push services
    /// to accept at least (and what the public ones accept at most).
    public var maximumBodySize: Int = 4_096
    /// The largest TTL kept: a larger `TTL` is accepted and the answer's `TTL` header says this one, as
    /// RFC 8030 §5.2 allows. Default 28 days.
    public var maximumTTL: Int = 28 * 24 * 3600
    /// Which subscription ids are gone (404 or 410), beside the subscriptions made gone when made.
    public var registry: WebPushSimulatorRegistry = .init()
    /// Injected failures; none by default.
    public var faults: WebPushSimulatorFaults = .init()
    /// Record every message answered 201 in ``WebPushSimulator/ledger``. Default `true`.
    public var ledgerEnabled: Bool = true
    /// Keep each accepted message's decrypted plaintext in the ledger (``WebPushSimulatorLedgerEntry/plaintext``,
    /// and a `plaintext` field in ``ledgerFile`` lines). Its SHA-256 is always kept. Default `false`.
    public var ledgerKeepsPayloads: Bool = false
    /// Also append each accepted message as a JSON line to this file. Default `nil`.
    public var ledgerFile: String? = nil
    /// Event-loop threads serving connections. Default: one per core.
    public var threadCount: Int = System.coreCount
    /// The wall clock VAPID tokens' `exp` is checked against; inject one to age tokens in tests.
    public var now: @Sendable () -> Date = { Date() }

    /// A configuration with every default.
    public init() {}

    /// The ALPN protocols the listener offers.
    var applicationProtocols: [String] { http1Only ? ["http/1.1"] : ["h2", "http/1.1"] }
}

/// Injected failures of the Web Push simulator, like ``SimulatorFaults`` and ``FCMSimulatorFaults``.
///
/// The per-message answers (429, 503, 500) are drawn from ``seed``, the subscription id and how many requests
/// that subscription has had, so the same seed and the same requests per subscription give the same outcomes
/// whatever the interleaving; a retry is a new draw. They apply to pushes that passed the subscription lookup,
/// VAPID and header checks. The connection-level faults count every request server-wide; on HTTP/1.1 a GOAWAY
/// becomes `Connection: close` after the answer (``SimulatorFaults/GoAwayMode/noError``) or a drop without one
/// (``SimulatorFaults/GoAwayMode/abortInFlight``).
public struct WebPushSimulatorFaults: Sendable {
    /// Seed of every random choice. Default 1.
    public var seed: UInt64 = 1
    /// Fraction of pushes answered `429 {"reason":"TooManyRequests"}`. Default 0.
    public var tooManyRequestsRate: Double = 0
    /// The `Retry-After` (seconds) of those 429s; `nil` sends none. Default 1.
    public var tooManyRequestsRetryAfterSeconds: Int? = 1
    /// Fraction of pushes answered `503 {"reason":"ServiceUnavailable"}`. Default 0.
    public var serviceUnavailableRate: Double = 0
    /// The `Retry-After` (seconds) of those 503s; `nil` (the default) sends none.
    public var serviceUnavailableRetryAfterSeconds: Int? = nil
    /// Fraction of pushes answered `500 {"reason":"InternalServerError"}`. Default 0.
    public var internalErrorRate: Double = 0
    /// Send a GOAWAY (HTTP/2) or close after answering (HTTP/1.1) when the server's request count reaches a
    /// multiple of N. Default `nil` (never).
    public var goAwayEveryStreams: Int? = nil
    /// How the GOAWAY fault treats requests in flight. Default ``SimulatorFaults/GoAwayMode/noError``.
    public var goAwayMode: SimulatorFaults.GoAwayMode = .noError
    /// The GOAWAY debug data in abort mode (HTTP/2). Default empty.
    public var goAwayDebugData: String = ""
    /// Close the TCP connection abruptly (unanswered) when the server's request count reaches a multiple of N.
    /// Default `nil`.
    public var resetEveryStreams: Int? = nil
    /// Delay before each answer. Default ``SimulatorLatency/none``.
    public var latency: SimulatorLatency = .none

    /// No faults.
    public init() {}

    var needsAttemptCounting: Bool { tooManyRequestsRate > 0 || serviceUnavailableRate > 0 || internalErrorRate > 0 }

    var connectionFaults: SimulatorConnectionFaults {
        SimulatorConnectionFaults(goAwayEveryStreams: goAwayEveryStreams, goAwayMode: goAwayMode,
                                  goAwayDebugData: goAwayDebugData, resetEveryStreams: resetEveryStreams)
    }
}
