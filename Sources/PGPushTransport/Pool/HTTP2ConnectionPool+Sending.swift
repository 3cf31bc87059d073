import NIOCore
import NIOHPACK
import PGPushCore

/// Sending: a request waits for a stream slot, gets its headers and the credential's token, and is handed to
/// its connection; its answer frees the slot and reaches the caller.
extension HTTP2ConnectionPool {
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
            stream.lease.connection.startStreams([pendingStream(stream) { continuation.resume(returning: $0) }])
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
        stream.lease.connection.startStreams([pendingStream(stream, onOutcome: reportingRejections(stream, onOutcome))])
    }

    /// Starts several requests as ``start(_:onOutcome:)`` does each, in order. The ones that get a stream slot
    /// at once are handed to their connections together: one hop to each connection's event loop and one
    /// flush, where a request at a time from another thread is written alone, a TLS record and a write
    /// syscall each. The rest wait for slots one by one, behind callers already waiting.
    public func start(_ batch: [PushSubmission]) async {
        guard batch.count > 1 else {
            if let only = batch.first { await start(only.request, onOutcome: only.onOutcome) }
            return
        }
        let token: ProviderToken?
        switch await currentToken() {
        case .success(let current): token = current
        case .failure(let failed):
            for submission in batch { submission.onOutcome(failed.outcome) }
            return
        }
        let leases = state.withLock { state -> [HTTP2StreamLease] in
            var leases: [HTTP2StreamLease] = []
            leases.reserveCapacity(batch.count)
            while leases.count < batch.count, case .leased(let id) = state.machine.leaseRequested() {
                leases.append(HTTP2StreamLease(connectionID: id, connection: state.connections[id]!))
            }
            return leases
        }
        // A pool has a handful of connections: a list searched in place beats a dictionary per batch.
        var perConnection: [(connection: any HTTP2PoolConnection, streams: [HTTP2PendingStream])] = []
        for (submission, lease) in zip(batch, leases) {
            let stream = prepared(submission.request, lease: lease, token: token)
            let pending = pendingStream(stream, onOutcome: reportingRejections(stream, submission.onOutcome))
            if let index = perConnection.firstIndex(where: { $0.connection === lease.connection }) {
                perConnection[index].streams.append(pending)
            } else {
                perConnection.append((lease.connection, [pending]))
            }
        }
        for (connection, streams) in perConnection { connection.startStreams(streams) }
        for submission in batch.dropFirst(leases.count) {
            await start(submission.request, onOutcome: submission.onOutcome)
        }
    }

    /// `onOutcome`, after an answer that rejects the request's token has gone to the token's source: the source
    /// hears of the rejection before the caller does, so a re-send signs a new token. The report awaits the
    /// source, which the event loop cannot: ``run()`` makes it, then calls `onOutcome`.
    private func reportingRejections(
        _ stream: PreparedStream, _ onOutcome: @escaping @Sendable (ProviderOutcome) -> Void
    ) -> @Sendable (ProviderOutcome) -> Void {
        guard credentials.tokenSource != nil else { return onOutcome }
        return { outcome in
            guard let rejected = self.rejectedToken(stream, outcome) else { return onOutcome(outcome) }
            self.rejections.submit(rejected, outcome: outcome, onOutcome: onOutcome)
        }
    }

    /// A request with its slot reserved and its headers built, ready to be written.
    private struct PreparedStream: Sendable {
        var lease: HTTP2StreamLease
        var headers: HTTP2HeaderBlock
        var body: [UInt8]
        var keepsBody: Bool
        var token: ProviderToken?
    }

    private enum Preparation: Sendable {
        case ready(PreparedStream)
        case failed(ProviderOutcome)
    }

    private func prepare<Request: PushRequest>(_ request: Request) async -> Preparation {
        let token: ProviderToken?
        switch await currentToken() {
        case .success(let current): token = current
        case .failure(let failed): return .failed(failed.outcome)
        }
        switch await acquireSlot() {
        case .granted(let lease): return .ready(prepared(request, lease: lease, token: token))
        case .failed(let reason): return .failed(.noResponse(reason))
        }
    }

    private func prepared<Request: PushRequest>(_ request: Request, lease: HTTP2StreamLease, token: ProviderToken?) -> PreparedStream {
        PreparedStream(
            lease: lease, headers: request.headerBlock(authority: authority, authorization: token?.authorizationHeaderValue),
            body: request.body, keepsBody: Request.keepsResponseBody, token: token)
    }

    /// Why no request can be signed now, as the outcome every such request gets.
    private struct TokenFailure: Error {
        var outcome: ProviderOutcome
    }

    /// The credential's current token (nil without token authentication).
    private func currentToken() async -> Result<ProviderToken?, TokenFailure> {
        guard let source = credentials.tokenSource else { return .success(nil) }
        if let atHand = source.tokenAtHand { return .success(atHand) }
        do {
            return .success(try await source.currentToken())
        } catch {
            // A refusal by the credential's issuer pauses the app; anything else may pass.
            if let refusal = error as? CredentialRefusal {
                return .failure(TokenFailure(outcome: .noResponse(.credentialRefused(reason: refusal.reason))))
            }
            return .failure(TokenFailure(outcome: .noResponse(.connectFailed(detail: "no provider token: \(error)"))))
        }
    }

    /// The stream as its connection writes it; `onOutcome` hears how it ended, after the pool has freed its slot.
    private func pendingStream(
        _ stream: PreparedStream, onOutcome: @escaping @Sendable (ProviderOutcome) -> Void
    ) -> HTTP2PendingStream {
        let connectionID = stream.lease.connectionID
        return HTTP2PendingStream(
            headers: stream.headers, body: stream.body, timeout: requestTimeout,
            maximumBodyBytes: configuration.maximumResponseBodyBytes, keepsBody: stream.keepsBody
        ) { result in
            onOutcome(self.streamFinished(connectionID, result))
        }
    }

    /// An answer that rejects the token the request carried goes back to the token's source; which answers do
    /// is the provider's rules' to say (``HTTP2ProviderRules/tokenRejectionReason(_:credentials:)``). A
    /// success never rejects its token, so the rules hear of errors only.
    private func rejectedToken(
        _ stream: PreparedStream, _ outcome: ProviderOutcome
    ) -> HTTP2TokenRejection? {
        guard case .response(let response) = outcome, let token = stream.token, !(200..<300).contains(response.status),
            let reason = rules.tokenRejectionReason(response, credentials: credentials), let source = credentials.tokenSource
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
        // Only an answer with a reason can retire its connection (the reason names the retirement), so the
        // rules hear of those only: a success is read by the rules once, when its stream ends.
        var retires = false
        if case .response(let response) = result, response.reason != nil { retires = rules.retiresConnection(response) }
        let (outcome, effects) = state.withLock { state in
            let (outcome, actions) = state.machine.streamClosed(connectionID, result: result, retiresConnection: retires)
            return (outcome, state.resolve(actions))
        }
        perform(effects)
        return outcome
    }
}
