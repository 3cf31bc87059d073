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
    let state = Mutex(HTTP2PoolState())

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
    }

    /// The current counters and limits.
    public var statistics: HTTP2PoolStatistics {
        state.withLock { $0.snapshot() }
    }

    // MARK: - Sending

    /// Sends one notification and returns what APNs answered, or why no answer came. Never throws.
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
    /// had). A caller with many requests in flight needs no task per request this way.
    public func start(_ request: some PushRequest, onOutcome: @escaping @Sendable (ProviderOutcome) -> Void) async {
        let stream: PreparedStream
        switch await prepare(request) {
        case .ready(let prepared): stream = prepared
        case .failed(let outcome): return onOutcome(outcome)
        }
        open(stream) { outcome in
            guard let rejected = self.rejectedToken(stream, outcome) else { return onOutcome(outcome) }
            // The source hears of the rejection before the caller does, so a re-send signs a new token.
            Task {
                await rejected.source.reportRejected(rejected.token, reason: rejected.reason)
                onOutcome(outcome)
            }
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
    ) -> (source: any ProviderTokenSource, token: ProviderToken, reason: String)? {
        guard case .response(let response) = outcome, let token = stream.token,
            let reason = credentials.tokenRejectionReason(response), let source = credentials.tokenSource
        else { return nil }
        return (source, token, reason)
    }

    private func acquireSlot() async -> HTTP2SlotGrant {
        let fast: Result<HTTP2SlotGrant, Never>? = state.withLock { state in
            state.acquireImmediately().map { .success($0) }
        }
        if case .success(let grant) = fast { return grant }

        let waiterID = state.withLock { state in
            let id = state.makeID()
            state.waiters[id] = .reserved
            return id
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<HTTP2SlotGrant, Never>) in
                let immediate = state.withLock { $0.enqueueWaiter(waiterID, continuation) }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            var effects = HTTP2PoolEffects()
            state.withLock { $0.cancelWaiter(waiterID, effects: &effects) }
            perform(effects)
        }
    }

    /// Runs on the connection's event loop when a stream ends: frees the slot, interprets the end, and
    /// hands the slot on.
    private func streamFinished(_ connectionID: Int, _ result: HTTP2StreamResult) -> ProviderOutcome {
        var effects = HTTP2PoolEffects()
        let outcome: ProviderOutcome = state.withLock { state in
            // Mutated in place: copying the entry out and back costs retains on every request.
            guard state.entries[connectionID] != nil else {
                return .noResponse(.connectionClosed)
            }
            let outcome: ProviderOutcome
            switch result {
            case .response(let response):
                outcome = .response(response)
            case .timedOut:
                outcome = .noResponse(.timeout)
            case .closed(let streamID, let resetCode, let sawHeadersWithoutStatus):
                outcome = sawHeadersWithoutStatus
                    ? .noResponse(.missingStatus)
                    : .noResponse(state.entries[connectionID]!.machine.noResponseReason(streamID: streamID, resetCode: resetCode))
            }
            let completed = state.entries[connectionID]!.machine.streamCompleted(status: outcome.status == 0 ? nil : outcome.status)
            var retire = HTTP2ConnectionStateMachine.Action.none
            if case .response(let response) = outcome, response.retiresConnection, let reason = response.reason {
                retire = state.entries[connectionID]!.machine.retire(.response(reason: reason))
            }
            state.apply(completed, to: connectionID, effects: &effects)
            state.apply(retire, to: connectionID, effects: &effects)
            state.removeIfFinished(connectionID, effects: &effects)
            state.grantWaiters(effects: &effects)
            return outcome
        }
        perform(effects)
        return outcome
    }

    // MARK: - Connection events

    func handle(_ event: HTTP2ConnectionEvent, connectionID: Int) {
        var effects = HTTP2PoolEffects()
        state.withLock { state in
            guard var entry = state.entries[connectionID] else { return }
            var action = HTTP2ConnectionStateMachine.Action.none
            switch event {
            case .settings(let maxConcurrentStreams):
                action = entry.machine.settingsReceived(maxConcurrentStreams: maxConcurrentStreams)
                if entry.machine.isReady, !entry.readySignalled {
                    entry.readySignalled = true
                    effects.readySucceeded.append(entry.ready)
                    state.lastConnectFailure = nil
                }
            case .goAway(let lastStreamID, let errorCode, let debugData):
                state.statistics.goAwaysReceived += 1
                action = entry.machine.goAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData)
                logger.info(
                    "\(configuration.provider) connection received GOAWAY",
                    metadata: [
                        "provider": "\(configuration.provider)",
                        "connection": "\(connectionID)", "lastStreamID": "\(lastStreamID)", "errorCode": "\(errorCode)",
                        "reason": "\(entry.machine.goAwayDebugReason ?? "-")",
                    ]
                )
            case .pingAck(let payload):
                entry.machine.pingAckReceived(payload)
            case .closed(let error, let tlsRejection):
                action = entry.machine.channelClosed()
                if !entry.readySignalled {
                    entry.readySignalled = true
                    effects.readyFailed.append((entry.ready, HTTP2ConnectFailure(
                        detail: error ?? "connection closed before HTTP/2 was ready", tlsRejection: tlsRejection)))
                }
            }
            state.entries[connectionID] = entry
            state.apply(action, to: connectionID, effects: &effects)
            state.removeIfFinished(connectionID, effects: &effects)
            state.grantWaiters(effects: &effects)
        }
        perform(effects)
    }

    func pingDue(_ connectionID: Int) {
        var effects = HTTP2PoolEffects()
        state.withLock { state in
            guard state.entries[connectionID] != nil else { return }
            let action = state.entries[connectionID]!.machine.pingDue()
            state.apply(action, to: connectionID, effects: &effects)
        }
        perform(effects)
    }

    private func pingTimedOut(_ connectionID: Int, _ payload: UInt64) {
        var effects = HTTP2PoolEffects()
        state.withLock { state in
            guard state.entries[connectionID] != nil else { return }
            let action = state.entries[connectionID]!.machine.pingTimeoutFired(payload)
            state.apply(action, to: connectionID, effects: &effects)
            state.grantWaiters(effects: &effects)
        }
        if !effects.close.isEmpty {
            logger.warning(
                "\(configuration.provider) connection did not answer PING; replacing it",
                metadata: ["provider": "\(configuration.provider)", "connection": "\(connectionID)"])
        }
        perform(effects)
    }

    func perform(_ effects: HTTP2PoolEffects) {
        effects.perform(pingTimeout: .nanoseconds(configuration.pingTimeout.nanosecondsInt64)) { id, payload in
            self.pingTimedOut(id, payload)
        }
    }
}
