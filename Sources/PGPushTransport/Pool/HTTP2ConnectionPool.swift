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
    private let authority: String
    private let requestTimeout: TimeAmount
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

    // MARK: - Sending

    /// Sends one request and returns what the provider answered, or why no answer came. Never throws.
    ///
    /// With token authentication the current JWT is taken from the ``ProviderTokenSource`` for every
    /// request (the source caches it), and a `403 ExpiredProviderToken` is reported back to the source.
    /// Cancelling a caller that still waits for a stream slot removes it from the queue.
    public func send(_ request: some PushRequest) async -> ProviderOutcome {
        let stream: PreparedStream
        switch await prepare(request) {
        case .ready(let prepared): stream = prepared
        case .failed(let outcome): return outcome
        }
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<ProviderOutcome, Never>) in
            open(stream) { continuation.resume(returning: $0) }
        }
        if let rejected = rejectedToken(stream, outcome) {
            await rejected.source.reportRejected(rejected.token, reason: rejected.reason)
        }
        return outcome
    }

    /// Waits for a stream slot like ``send(_:)``, writes the request, and returns without waiting for the
    /// answer: `onOutcome` runs exactly once, on the connection's event loop (or at once when no slot can be
    /// had; or in ``run()``'s task after a rejected token was reported to its source). A caller with many
    /// requests in flight needs no task per request this way.
    public func start(_ request: some PushRequest, onOutcome: @escaping @Sendable (ProviderOutcome) -> Void) async {
        let stream: PreparedStream
        switch await prepare(request) {
        case .ready(let prepared): stream = prepared
        case .failed(let outcome): return onOutcome(outcome)
        }
        open(stream) { outcome in
            guard let rejected = self.rejectedToken(stream, outcome) else { return onOutcome(outcome) }
            // The source hears of the rejection before the caller does, so a re-send signs a new token. The
            // report awaits the source, which the event loop cannot: ``run()`` makes it, then calls `onOutcome`.
            self.rejections.submit(rejected, outcome: outcome, onOutcome: onOutcome)
        }
    }

    /// A request with its slot reserved and its headers built, ready to be written.
    private struct PreparedStream: Sendable {
        var lease: HTTP2StreamLease
        var headers: HPACKHeaders
        var body: [UInt8]
        var keepsBody: Bool
        var token: ProviderToken?
    }

    private enum Preparation: Sendable {
        case ready(PreparedStream)
        case failed(ProviderOutcome)
    }

    private func prepare<Request: PushRequest>(_ request: Request) async -> Preparation {
        var token: ProviderToken?
        if let source = credentials.tokenSource {
            if let atHand = source.tokenAtHand {
                token = atHand
            } else {
                do {
                    token = try await source.currentToken()
                } catch {
                    // A refusal by the credential's issuer pauses the app; anything else may pass.
                    if let refusal = error as? CredentialRefusal {
                        return .failed(.noResponse(.credentialRefused(reason: refusal.reason)))
                    }
                    return .failed(.noResponse(.connectFailed(detail: "no provider token: \(error)")))
                }
            }
        }
        switch await acquireSlot() {
        case .granted(let lease):
            let headers = request.headers(authority: authority, authorization: token?.authorizationHeaderValue)
            return .ready(PreparedStream(
                lease: lease, headers: headers, body: request.body, keepsBody: Request.keepsResponseBody, token: token))
        case .failed(let reason):
            return .failed(.noResponse(reason))
        }
    }

    private func open(_ stream: PreparedStream, onOutcome: @escaping @Sendable (ProviderOutcome) -> Void) {
        let connectionID = stream.lease.connectionID
        stream.lease.connection.startStream(
            headers: stream.headers,
            body: stream.body,
            timeout: requestTimeout,
            maximumBodyBytes: configuration.maximumResponseBodyBytes,
            keepsBody: stream.keepsBody
        ) { result in
            onOutcome(self.streamFinished(connectionID, result))
        }
    }

    /// An answer that rejects the token the request carried goes back to the token's source (see
    /// ``ProviderCredentials``): APNs' 403 ExpiredProviderToken and its kin, FCM's 401 as `UNAUTHENTICATED`.
    private func rejectedToken(
        _ stream: PreparedStream, _ outcome: ProviderOutcome
    ) -> HTTP2TokenRejection? {
        guard case .response(let response) = outcome, let token = stream.token,
            let reason = credentials.tokenRejectionReason(response), let source = credentials.tokenSource
        else { return nil }
        return HTTP2TokenRejection(source: source, token: token, reason: reason)
    }

    private func acquireSlot() async -> HTTP2SlotGrant {
        let fast: HTTP2SlotGrant? = state.withLock { state in
            switch state.machine.leaseRequested() {
            case .leased(let id): .granted(HTTP2StreamLease(connectionID: id, connection: state.connections[id]!))
            case .failed(let reason): .failed(reason)
            case .mustWait: nil
            }
        }
        if let fast { return fast }

        let waiterID = state.withLock { $0.machine.waiterAdded() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<HTTP2SlotGrant, Never>) in
                let immediate: HTTP2SlotGrant? = state.withLock { state in
                    switch state.machine.waiterSuspending(waiterID) {
                    case .leased(let id):
                        return .granted(HTTP2StreamLease(connectionID: id, connection: state.connections[id]!))
                    case .failed(let reason):
                        return .failed(reason)
                    case .mustWait:
                        state.waiters[waiterID] = continuation
                        return nil
                    }
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            apply { $0.waiterCancelled(waiterID).map { [$0] } ?? [] }
        }
    }

    /// Runs on the connection's event loop when a stream ends: frees the slot, interprets the end, and
    /// hands the slot on.
    private func streamFinished(_ connectionID: Int, _ result: HTTP2StreamResult) -> ProviderOutcome {
        var retires = false
        if case .response(let response) = result { retires = response.retiresConnection }
        let (outcome, effects) = state.withLock { state in
            let (outcome, actions) = state.machine.streamClosed(connectionID, result: result, retiresConnection: retires)
            return (outcome, state.resolve(actions))
        }
        perform(effects)
        return outcome
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
