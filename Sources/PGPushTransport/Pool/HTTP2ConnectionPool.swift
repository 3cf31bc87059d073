import Logging
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL
import PGPushCore
import ServiceLifecycle
import Synchronization

/// A pool of long-lived HTTP/2 connections to one provider for one credential: a push service or an OAuth
/// token endpoint. Requests are ``PushRequest``s; the pool knows connections, streams and credentials, and
/// asks the provider's rules (``HTTP2ClientConfiguration/provider``) what an answer, a GOAWAY or a TLS
/// refusal means.
///
/// ``run()`` keeps ``HTTP2ClientConfiguration/connectionsPerPool`` connections open and replaces dead or
/// draining ones with backoff. ``send(_:)`` waits for a free stream slot (callers are the only queue: there
/// is no internal buffer), writes the request and returns its outcome. Streams per connection never exceed
/// the server's live `SETTINGS_MAX_CONCURRENT_STREAMS` (nor the client cap, nor 1 before the first success
/// with token authentication).
///
/// Every decision is the ``HTTP2PoolStateMachine``'s, timers included; this class holds the objects its ids
/// stand for and carries out its actions. Connections come from an ``HTTP2ConnectionFactory`` and timers
/// sleep on an injected clock, so the pool runs in tests without sockets or real time.
public final class HTTP2ConnectionPool: Service, Sendable {
    let configuration: HTTP2ClientConfiguration
    /// `configuration.provider`, kept apart so the event loop reads it without copying the configuration.
    let rules: any HTTP2ProviderRules
    let credentials: ProviderCredentials
    let logger: Logger
    let authority: String
    let requestTimeout: TimeAmount
    let state: Mutex<HTTP2PoolResources>
    /// Rejected tokens of ``start(_:onOutcome:)`` calls, reported by ``run()``.
    let rejections = HTTP2TokenRejections()
    let factory: any HTTP2ConnectionFactory
    let clock: any Clock<Duration>
    /// Connections to open and timers to run, consumed by ``run()``.
    let events: AsyncStream<HTTP2PoolRunEvent>
    let eventSink: AsyncStream<HTTP2PoolRunEvent>.Continuation
    /// Told of every timer once the state machine has handled it (tests wait on it; nothing else does).
    let onTimerHandled: (@Sendable (HTTP2PoolStateMachine.Timer) -> Void)?

    /// - Throws: ``PGPushError`` if the TLS context cannot be built (unreadable trust roots, a certificate
    ///   and key that do not match).
    public convenience init(
        configuration: HTTP2ClientConfiguration,
        credentials: ProviderCredentials,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) throws {
        let factory = HTTP2TLSConnectionFactory(
            configuration: configuration,
            sslContext: try HTTP2TLSContext.make(configuration: configuration, credentials: credentials),
            eventLoopGroup: eventLoopGroup,
            logger: logger)
        self.init(configuration: configuration, credentials: credentials, factory: factory, clock: ContinuousClock(), logger: logger)
    }

    /// - Parameters:
    ///   - factory: Opens the connections.
    ///   - clock: What the pool's timers sleep on.
    ///   - timing: The timers' durations; by default those of `configuration`.
    ///   - onTimerHandled: Told of every timer once the state machine has handled it.
    init(
        configuration: HTTP2ClientConfiguration,
        credentials: ProviderCredentials,
        factory: any HTTP2ConnectionFactory,
        clock: any Clock<Duration>,
        timing: HTTP2PoolStateMachine.Timing? = nil,
        logger: Logger,
        onTimerHandled: (@Sendable (HTTP2PoolStateMachine.Timer) -> Void)? = nil
    ) {
        self.onTimerHandled = onTimerHandled
        self.configuration = configuration
        self.rules = configuration.provider
        self.credentials = credentials
        self.logger = logger
        self.factory = factory
        self.clock = clock
        self.authority = configuration.endpoint.authority
        self.requestTimeout = .nanoseconds(configuration.requestTimeout.nanosecondsInt64)
        self.state = Mutex(HTTP2PoolResources(machine: HTTP2PoolStateMachine(
            clientCap: configuration.maximumStreamsPerConnectionCap,
            singleStreamUntilFirstSuccess: configuration.provider.startsWithSingleStream(credentials),
            timing: timing ?? HTTP2PoolStateMachine.Timing(configuration)
        )))
        (events, eventSink) = AsyncStream.makeStream(of: HTTP2PoolRunEvent.self)
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
                let actions = machine.goAwayReceived(
                    id, lastStreamID: lastStreamID, errorCode: errorCode, debugReason: debugData.flatMap(rules.goAwayReason))
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
            case .closed(let error, let tlsRefusal):
                return machine.channelClosed(id, failure: HTTP2ConnectFailure(
                    detail: error ?? "connection closed before HTTP/2 was ready",
                    tlsRejection: tlsRefusal.map(rules.tlsRefusalReason)))
            }
        }
    }

    /// A timer of the state machine is due.
    func timerFired(_ timer: HTTP2PoolStateMachine.Timer) {
        let effects = state.withLock { $0.resolve($0.machine.timerFired(timer)) }
        if case .pingTimeout(let id, _) = timer.kind, effects.closesConnection {
            logger.warning(
                "\(configuration.provider) connection did not answer PING; replacing it",
                metadata: ["provider": "\(configuration.provider)", "connection": "\(id)"])
        }
        perform(effects)
        onTimerHandled?(timer)
    }

    /// Feeds one event to the state machine under the lock, then carries out its actions.
    func apply(_ event: (inout HTTP2PoolStateMachine) -> [HTTP2PoolStateMachine.Action]) {
        let effects = state.withLock { $0.resolve(event(&$0.machine)) }
        perform(effects)
    }

    func perform(_ effects: HTTP2PoolEffects) {
        for (continuation, grant) in effects.grants { continuation.resume(returning: grant) }
        for effect in effects.others {
            switch effect {
            case .close(let connection):
                connection.close()
            case .ping(let connection, let payload):
                connection.sendPing(payload)
            case .run(let event):
                eventSink.yield(event)
            case .resume(let timerTask):
                timerTask.resume()
            case .logReady(let id):
                logger.debug(
                    "\(configuration.provider) connection ready",
                    metadata: ["provider": "\(configuration.provider)", "connection": "\(id)"])
            case .logFailure(_, let failure):
                logger.log(
                    level: failure.quiet ? .debug : .warning,
                    "\(configuration.provider) connection attempt failed",
                    metadata: ["provider": "\(configuration.provider)", "error": "\(failure.tlsRejection ?? failure.detail)"])
            case .finishRun(let waiter):
                eventSink.finish()
                waiter?.resume()
            }
        }
    }
}
