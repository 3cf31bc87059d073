import Foundation
import PGPushCore
import PGPushTransport

/// Everything a worker can be told. Every value has a production default; `pgpush worker --help` maps each one
/// to a flag and a `PGPUSH_*` environment variable.
public struct WorkerConfiguration: Sendable {
    /// Identifies this worker in leases and the live-worker registry. Defaults to `host:pid:random`.
    public var workerID: String = WorkerConfiguration.defaultWorkerID()
    /// Devices per chunk when a job is expanded. Smaller chunks spread a broadcast over more workers and bound
    /// the duplicates after a crash; larger ones cost fewer statements per token.
    public var chunkSize: Int = 1000
    /// Notifications held at once: in flight, waiting for their turn, or claimed ahead. Claims are sized to the
    /// free room, so a worker only takes what it can send, and a thousand one-token jobs cost what one
    /// 1,000-token chunk does. `nil` derives it: twice ``requestsInFlightPerApp``, so the streams stay full
    /// while the next claim is on its way.
    public var maximumInFlight: Int?
    /// Requests one app may have in flight from this worker at most (its adaptive limit grows up to this).
    /// Enough to fill the pipe (250 per connection carry 8,000/s per connection, 33,000/s per app, at a 30 ms
    /// round trip), and no more: every request beyond that only waits in APNs' queue, where an urgent notification would
    /// wait behind it, and a server that slows down under a deep queue misses its PING deadline.
    public var requestsInFlightPerApp: Int?
    /// How long a claim is valid without a heartbeat. A crashed worker's chunks are rescued after this.
    public var lease: Duration = .seconds(30)
    /// How often leases and the registry heartbeat are renewed.
    public var heartbeatInterval: Duration = .seconds(10)
    /// The backstop poll when no NOTIFY arrives; without a listen URL, the only wake-up for new work, so it
    /// bounds the wait of a new job (half of it on average).
    public var pollInterval: Duration = .seconds(1)
    /// How long a graceful shutdown may spend draining in-flight requests before giving the rest back.
    public var gracePeriod: Duration = .seconds(30)
    /// A chunk claimed more often than this (every rescue counts) is a poison chunk: its tokens are recorded as
    /// failed instead of being sent again.
    public var maximumClaims: Int = 5
    /// Backoff and attempt limit for transient failures (429, 5xx, connection loss).
    public var retryPolicy = RetryPolicy()
    /// HTTP/2 connections per app. Four with 250 streams each carry what two with 500 do, for less CPU: the
    /// HTTP/2 stack's cost per stream grows with the streams open on its connection (BENCHMARKS.md).
    public var connectionsPerApp: Int = 4
    /// The HTTP/2 implementation of every provider connection, Web Push's included (`--http2-engine`).
    public var http2Engine: HTTP2Engine = .default
    /// Per-request deadline.
    public var requestTimeout: Duration = .seconds(15)
    /// Sends every app's traffic to this base URL (a simulator or a staging relay) instead of Apple's hosts.
    public var apnsEndpointOverride: String?
    /// A PEM file of extra trusted CAs (e.g. the simulator's), added to the system roots.
    public var apnsCAFile: String?
    /// Where Live Activity broadcast channels are made, read and deleted, instead of Apple's channel management
    /// hosts (`api-manage-broadcast(.sandbox).push.apple.com`, ports 2196 and 2195, by the app's environment).
    public var apnsChannelsEndpointOverride: String?
    /// Where channel broadcasts (`POST /4/broadcasts/apps/<bundle id>`) go. Apple's documents disagree on the
    /// host; by default they go where the app's other pushes go (``apnsEndpointOverride`` or Apple's host).
    public var apnsBroadcastEndpointOverride: String?
    /// How often the maintenance leader compares each app's active channels with APNs' `all-channels`, and
    /// marks the ones deleted elsewhere as deleted.
    public var channelReconcileInterval: Duration = .seconds(300)
    /// How often a worker looks for channels to make or delete when no NOTIFY woke it.
    public var channelPollInterval: Duration = .seconds(1)
    /// A Live Activity update token not registered again within this long is removed by maintenance (with an
    /// audit row): an activity lives up to 8 hours, and up to 4 more on the Lock Screen.
    public var activityTokenLifetime: Duration = .seconds(12 * 3600)
    /// Sends every app's FCM traffic to this base URL (a simulator) instead of `https://fcm.googleapis.com`.
    public var fcmEndpointOverride: String?
    /// A PEM file of extra trusted CAs for FCM and for the service accounts' `token_uri`.
    public var fcmCAFile: String?
    /// Origins Web Push messages may go to besides the public push services (Google, Mozilla, Apple,
    /// Microsoft): `--web-push-allow-origin`, such as `https://push.example.net` or `https://*.push.example.net`.
    /// An endpoint comes from a browser, so it is untrusted: without this allow-list, anyone who can register a
    /// subscription could make workers send requests into the operator's own network. Any other endpoint fails
    /// its token with `EndpointNotAllowed`, and no connection is made.
    public var webPushAllowedOrigins: [String] = []
    /// A PEM file of extra trusted CAs for push services (`--web-push-ca-file`): a simulator's, in tests.
    public var webPushCAFile: String?
    /// FCM messages a minute per Firebase project for the whole fleet: FCM's default project quota, shared by
    /// every app of the project. Raise it for a project with a larger quota (or the simulator, which has none).
    public var fcmQuotaPerMinute: Int = 600_000
    /// An HTTP proxy every provider connection (APNs, FCM, the FCM OAuth token endpoint, channel management) is
    /// tunnelled through with `CONNECT`, except to hosts its bypass list (`NO_PROXY`) names. While tunnels fail,
    /// the worker is not ready (`/readyz`) and says why once every few seconds.
    public var httpsProxy: HTTPProxyConfiguration?
    /// When set, key and certificate paths from `push.apps` must resolve inside this directory.
    public var credentialsDirectory: String?
    /// Configuration errors from APNs (BadTopic, InvalidProviderToken, …) tolerated before the app is paused.
    public var pauseAfterConfigurationErrors: Int = 3
    /// The wrong-environment safety valve: if more than this share of a job's answers are BadDeviceToken,
    /// once at least `badDeviceTokenMinimumAnswers` answers are in, the app is paused and nothing is pruned.
    public var badDeviceTokenShare: Double = 0.2
    public var badDeviceTokenMinimumAnswers: Int = 1000
    /// Finished jobs, pruning audit rows, prune candidates and job events older than this are removed by
    /// maintenance, a small batch of each per pass. `push.deliveries` keeps its own retention: whole daily partitions.
    public var retention: Duration = .seconds(30 * 86_400)
    /// Devices not registered again for this long are removed by the maintenance leader, each with a
    /// `push.pruned_devices` row of reason `Stale`; `nil` (the default) keeps them until their provider reports
    /// them dead. Firebase considers a token stale after about a month without activity.
    public var staleDeviceAge: Duration?
    /// How often the leader sweeps `push.devices` for stale devices (with ``staleDeviceAge``): each sweep reads
    /// the table once, so not every maintenance pass.
    public var staleDeviceSweepInterval: Duration = .seconds(3600)
    /// How often each maintenance task runs (partitions, stuck jobs, pruning, …): every task is its own service,
    /// waiting this long after its pass before the next.
    public var maintenanceInterval: Duration = .seconds(5)
    /// At most this much is added at random to each maintenance task's wait, so that the tasks of a fleet drift
    /// apart; zero (the default) waits exactly the interval.
    public var maintenanceJitter: Duration = .zero
    /// How long the maintenance leadership lasts without renewal: the chunk lease, since the heartbeat renews
    /// both. A dead leader is replaced once it runs out, as its chunks are rescued.
    public var leaderLease: Duration { lease }
    /// Provider-token refresh rules (shared across the fleet through the database).
    public var providerTokenPolicy = ProviderTokenRefreshPolicy()
    /// PostgreSQL connections this worker may open for its statements; one idle for 5 s is closed. LISTEN
    /// (new jobs, cancels) takes two more, on the listen URL's own client.
    public var databaseConnections: Int = 8
    /// An app's connection pool with nothing to send for this long is closed; the next chunk opens it again.
    /// Long enough that steady traffic keeps its connections (APNs dislikes connect/close churn), short enough
    /// that a fleet serving many apps does not hold connections for apps that went quiet.
    public var idlePoolTimeout: Duration = .seconds(600)

    public init() {}

    /// The streams APNs usually allows per connection once a connection is established.
    public static let typicalStreamsPerConnection = 1000

    /// ``maximumInFlight``, or the default derived from ``inFlightPerApp``.
    public var capacity: Int {
        maximumInFlight ?? 2 * inFlightPerApp
    }

    /// ``requestsInFlightPerApp``, or 250 per connection.
    public var inFlightPerApp: Int {
        requestsInFlightPerApp ?? max(1, connectionsPerApp) * Self.typicalStreamsPerConnection / 4
    }

    public static func defaultWorkerID() -> String {
        let host = ProcessInfo.processInfo.hostName
        let suffix = UInt32.random(in: 0...UInt32.max)
        return "\(host):\(ProcessInfo.processInfo.processIdentifier):\(String(suffix, radix: 16))"
    }
}
