import PGPushCore

/// How an ``HTTP2ConnectionPool`` connects and paces itself. Every value but the endpoint and the provider has
/// a default suited to a push provider; each provider's folder under `Providers/` may add its own defaults.
public struct HTTP2ClientConfiguration: Sendable {
    /// The service to connect to.
    public var endpoint: ProviderEndpoint

    /// The rules of the provider the pool talks to: how its answers and GOAWAYs read, which answers retire a
    /// connection or reject a token, what a TLS refusal means. Its `description` names the pool in log lines,
    /// e.g. "Google OAuth connection received GOAWAY". Chosen once per pool; consulted at most once per answer.
    public var provider: any HTTP2ProviderRules

    /// A PEM file of extra CA certificates trusted in addition to the system roots (for the simulator's CA).
    /// Certificate verification is always on; there is no switch to turn it off.
    public var additionalTrustRootsPEMFile: String?

    /// An HTTP proxy to tunnel the connections through with `CONNECT`, unless its bypass list (`NO_PROXY`) names
    /// the endpoint's host. TLS to the endpoint runs inside the tunnel, verified as without a proxy.
    public var proxy: HTTPProxyConfiguration?

    /// Long-lived HTTP/2 connections kept open; a few give throughput.
    public var connectionsPerPool: Int = 2

    /// How long a request may wait for its response once written; then it ends with `.noResponse(.timeout)`
    /// and the stream is reset.
    public var requestTimeout: Duration = .seconds(15)

    /// How long a TCP connect plus TLS handshake plus the server's first SETTINGS may take.
    public var connectTimeout: Duration = .seconds(10)

    /// How often an HTTP/2 PING checks each connection.
    public var pingInterval: Duration = .seconds(30)

    /// How long a PING may go unanswered before the connection is closed and replaced.
    public var pingTimeout: Duration = .seconds(10)

    /// Delay between failed connection attempts (and after connections that die young).
    public var reconnectBackoff = ReconnectBackoff()

    /// A client-side ceiling on concurrent streams per connection. The server's live
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` still wins when it is lower.
    public var maximumStreamsPerConnectionCap: Int = 1000

    /// The largest response body read; a push error body is usually a few dozen bytes.
    public var maximumResponseBodyBytes: Int = 4096

    /// The HTTP/2 implementation under TLS (``HTTP2Engine/default``: libnghttp2).
    public var http2Engine: HTTP2Engine = .default

    /// Defaults throughout, connecting to `endpoint` with `provider`'s rules.
    public init(endpoint: ProviderEndpoint, provider: any HTTP2ProviderRules) {
        self.endpoint = endpoint
        self.provider = provider
    }
}

/// Exponential backoff with full jitter between connection attempts.
public struct ReconnectBackoff: Sendable, Hashable {
    /// The first delay's upper bound.
    public var minimum: Duration = .milliseconds(100)
    /// The largest delay.
    public var maximum: Duration = .seconds(30)
    /// Growth per consecutive failure.
    public var multiplier: Double = 2

    public init() {}

    public init(minimum: Duration, maximum: Duration, multiplier: Double = 2) {
        self.minimum = minimum
        self.maximum = maximum
        self.multiplier = multiplier
    }

    /// The delay before attempt `failures + 1`: uniformly random between `minimum` and the capped exponential bound,
    /// so a fleet that lost its connections together does not reconnect in lockstep.
    public func delay(afterFailures failures: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let minSeconds = minimum.inSeconds
        let maxSeconds = maximum.inSeconds
        let exponent = Double(max(0, min(failures, 62)))
        let bound = min(maxSeconds, minSeconds * pow2(multiplier, exponent))
        guard bound > minSeconds else { return .nanoseconds(Int64(minSeconds * 1e9)) }
        let seconds = Double.random(in: minSeconds...bound, using: &generator)
        return .nanoseconds(Int64(seconds * 1e9))
    }

    public func delay(afterFailures failures: Int) -> Duration {
        var generator = SystemRandomNumberGenerator()
        return delay(afterFailures: failures, using: &generator)
    }
}

private func pow2(_ base: Double, _ exponent: Double) -> Double {
    var result = 1.0
    var remaining = Int(exponent)
    while remaining > 0 && result < 1e12 {
        result *= base
        remaining -= 1
    }
    return result
}

extension Duration {
    var nanosecondsInt64: Int64 {
        let parts = components
        return parts.seconds * 1_000_000_000 + parts.attoseconds / 1_000_000_000
    }
}
