import Logging
import NIOCore
import NIOSSL
import PGPushCore

/// What the pool needs of one open connection: a place to start streams, PINGs, and a close. Its events
/// (SETTINGS, GOAWAY, PING ACK, the close) reach the pool through the `onEvent` its factory was given.
protocol HTTP2PoolConnection: AnyObject, Sendable {
    var id: Int { get }
    /// Queues the requests, whose stream slots are reserved; each one's `onResult` runs exactly once.
    func startStreams(_ streams: [HTTP2PendingStream])
    func sendPing(_ payload: UInt64)
    /// Closes the channel; open streams end without an answer, then `.closed` is reported.
    func close()
}

/// Opens the pool's connections. The pool runs each call in its run's task group; a connection it returns is
/// attached, and a thrown ``HTTP2ConnectFailure`` (or any error) is a failed attempt.
protocol HTTP2ConnectionFactory: Sendable {
    /// Opens connection `id`, returning once it can be written to (TCP up); the TLS handshake and the
    /// server's SETTINGS may follow as events through `onEvent`.
    func makeConnection(
        id: Int, onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) async throws -> any HTTP2PoolConnection
}

extension HTTP2Connection: HTTP2PoolConnection {}

/// The production factory: TCP (through the configured proxy, if any), TLS with ALPN h2, HTTP/2.
struct HTTP2TLSConnectionFactory: HTTP2ConnectionFactory {
    let configuration: HTTP2ClientConfiguration
    let sslContext: NIOSSLContext
    let eventLoopGroup: any EventLoopGroup
    let logger: Logger

    func makeConnection(
        id: Int, onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) async throws -> any HTTP2PoolConnection {
        do {
            return try await HTTP2Connection.connect(
                id: id,
                endpoint: configuration.endpoint,
                rules: configuration.provider,
                sslContext: sslContext,
                eventLoop: eventLoopGroup.next(),
                connectTimeout: configuration.connectTimeout,
                requestTimeout: .nanoseconds(configuration.requestTimeout.nanosecondsInt64),
                engine: configuration.http2Engine,
                proxy: configuration.proxy,
                logger: logger,
                onEvent: onEvent
            )
        } catch {
            // A proxy's refusal is logged by its HTTPProxyStatus, once every few seconds for every pool.
            throw HTTP2ConnectFailure(
                detail: String(describing: error), tlsRejection: TLSRefusal(error).map(configuration.provider.tlsRefusalReason),
                quiet: error is HTTPProxyError)
        }
    }
}
