import Logging
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL
import PGPushCore
import ServiceLifecycle
import Synchronization

/// A pool of long-lived HTTP/2 connections to one provider for one credential: APNs, FCM, or an OAuth token
/// endpoint. Requests are ``PushRequest``s; the pool knows connections, streams and credentials, not what
/// an answer means.
///
/// ``run()`` keeps ``HTTP2ClientConfiguration/connectionsPerPool`` connections open and replaces dead or
/// draining ones with backoff. ``send(_:)`` waits for a free stream slot (callers are the only queue: there
/// is no internal buffer), writes the request and returns its outcome. Streams per connection never exceed
/// the server's live `SETTINGS_MAX_CONCURRENT_STREAMS` (nor the client cap, nor 1 before the first success
/// with token authentication).
public final class HTTP2ConnectionPool: Service, Sendable {
    let configuration: HTTP2ClientConfiguration
    let credentials: ProviderCredentials
    let eventLoopGroup: any EventLoopGroup
    let logger: Logger
    let sslContext: NIOSSLContext
    let authority: String
    let requestTimeout: TimeAmount
    let state: Mutex<HTTP2PoolResources>
    /// Rejected tokens of ``start(_:onOutcome:)`` calls, reported by ``run()``.
    let rejections = HTTP2TokenRejections()

    /// - Throws: ``PGPushError`` if the TLS context cannot be built (unreadable trust roots, a certificate
    ///   and key that do not match).
    public init(
        configuration: HTTP2ClientConfiguration,
        credentials: ProviderCredentials,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) throws {
        self.configuration = configuration
        self.credentials = credentials
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.sslContext = try HTTP2TLSContext.make(configuration: configuration, credentials: credentials)
        self.authority = configuration.endpoint.authority
        self.requestTimeout = .nanoseconds(configuration.requestTimeout.nanosecondsInt64)
        self.state = Mutex(HTTP2PoolResources(machine: HTTP2PoolStateMachine(
            clientCap: configuration.maximumStreamsPerConnectionCap,
            singleStreamUntilFirstSuccess: credentials.startsWithSingleStream
        )))
    }

    /// The current counters and limits.
    public var statistics: HTTP2PoolStatistics {
        state.withLock { $0.machine.snapshot() }
    }

    // MARK: - Connection events

    func handle(_ event: HTTP2ConnectionEvent, connectionID id: Int) {
        apply { machine in
            switch event {
            case .settings(let maxConcurrentStreams):
                return machine.settingsReceived(id, maxConcurrentStreams: maxConcurrentStreams)
            case .goAway(let lastStreamID, let errorCode, let debugData):
                let actions = machine.goAwayReceived(id, lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData)
                logger.info(
                    "\(configuration.provider) connection received GOAWAY",
                    metadata: [
                        "provider": "\(configuration.provider)",
                        "connection": "\(id)", "lastStreamID": "\(lastStreamID)", "errorCode": "\(errorCode)",
                        "reason": "\(machine.goAwayDebugReason(id) ?? "-")",
                    ]
                )
                return actions
            case .pingAck(let payload):
                return machine.pingAckReceived(id, payload: payload)
            case .closed(let error, let tlsRejection):
                return machine.channelClosed(id, failure: HTTP2ConnectFailure(
                    detail: error ?? "connection closed before HTTP/2 was ready", tlsRejection: tlsRejection))
            }
        }
    }

    func pingDue(_ connectionID: Int) {
        apply { $0.pingDue(connectionID) }
    }

    private func pingTimedOut(_ connectionID: Int, _ payload: UInt64) {
        let effects = state.withLock { $0.resolve($0.machine.pingTimedOut(connectionID, payload: payload)) }
        if !effects.close.isEmpty {
            logger.warning(
                "\(configuration.provider) connection did not answer PING; replacing it",
                metadata: ["provider": "\(configuration.provider)", "connection": "\(connectionID)"])
        }
        perform(effects)
    }

    /// Feeds one event to the state machine under the lock, then carries out its actions.
    func apply(_ event: (inout HTTP2PoolStateMachine) -> [HTTP2PoolStateMachine.Action]) {
        let effects = state.withLock { $0.resolve(event(&$0.machine)) }
        perform(effects)
    }

    func perform(_ effects: HTTP2PoolEffects) {
        effects.perform(pingTimeout: .nanoseconds(configuration.pingTimeout.nanosecondsInt64)) { id, payload in
            self.pingTimedOut(id, payload)
        }
    }
}
