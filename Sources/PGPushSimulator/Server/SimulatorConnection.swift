import Crypto
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import PGPushCore

/// The answer to one stream.
struct SimulatorResponse: Sendable {
    var status: Int
    var reason: String?
    var timestampMilliseconds: Int64?
    var apnsID: String
    /// Recorded in the ledger when (and only if) the response is written.
    var ledgerEntry: SimulatorLedger.StoredEntry?
    /// Set by the malformed-answer fault: written in this broken shape instead, never recorded in the ledger.
    var malformation: MalformedAnswer?
    /// Picks the variant within a malformation.
    var malformationSeed: UInt64 = 0
}

/// What a stream handler does with a complete request.
enum SimulatorStreamAction {
    case respond(SimulatorResponse, delay: TimeAmount?)
    /// The connection is being dropped by a fault: leave the stream unanswered.
    case leaveUnanswered
}

/// One client connection: its advertised stream limit, authentication, and fault counters.
///
/// Confined to the connection's event loop (the TCP channel and all its stream channels share it), which is
/// why it is `@unchecked Sendable`: the stream initializer closure must be `Sendable` to capture it.
final class SimulatorConnection: @unchecked Sendable {
    let server: SimulatorServerContext
    let channel: Channel
    let abruptCloser: AbruptCloseHandler
    /// `nil` on a token-auth connection; the topics the client certificate may push to otherwise (empty = any).
    let certificateTopics: [String]?
    let number: Int

    private(set) var advertisedLimit: Int
    private var authenticated: Bool
    private var limitIsBinding = false
    private var openStreams = 0
    private var maximumOpenStreams = 0
    private var requestsReceived = 0
    private var highestStreamID = 0
    private var unansweredStreamIDs = Set<Int>()
    private var boundKeyID: String?
    private var lastProviderToken: String?
    private var lastProviderTokenIssuedAt: Int64 = 0
    private var draining = false
    private(set) var dropped = false
    private var latencyState: UInt64

    init(server: SimulatorServerContext, channel: Channel, abruptCloser: AbruptCloseHandler,
         certificateTopics: [String]?, number: Int) {
        self.server = server
        self.channel = channel
        self.abruptCloser = abruptCloser
        self.certificateTopics = certificateTopics
        self.number = number
        let configuration = server.configuration
        self.authenticated = certificateTopics != nil
        self.advertisedLimit = certificateTopics != nil ? configuration.streamsAfterAuth : configuration.streamsBeforeAuth
        self.latencyState = FaultHash.mix(configuration.faults.seed ^ UInt64(number))
    }

    // MARK: Streams

    /// The client acknowledged the simulator's first SETTINGS: from now on the advertised limit is binding.
    func settingsAcknowledged() {
        limitIsBinding = true
    }

    /// A stream opened; returns `false` when it exceeds the advertised limit and must be refused.
    ///
    /// Until the client has acknowledged the first SETTINGS it may not have seen the limit, and RFC 9113 lets
    /// it assume 100 streams meanwhile (NIO and nghttp2 do). Such early streams are accepted and counted in
    /// ``SimulatorStatistics/streamsBeyondLimitBeforeSettingsAcknowledged``; later ones are refused.
    func streamOpened(id: Int) -> Bool {
        if openStreams >= advertisedLimit {
            if limitIsBinding || openStreams >= Self.limitAssumedBeforeSettings {
                server.statistics.update { $0.streamLimitViolations += 1 }
                return false
            }
            server.statistics.update { $0.streamsBeyondLimitBeforeSettingsAcknowledged += 1 }
        }
        openStreams += 1
        unansweredStreamIDs.insert(id)
        highestStreamID = max(highestStreamID, id)
        if openStreams > maximumOpenStreams {
            maximumOpenStreams = openStreams
            let observed = openStreams
            server.statistics.update {
                $0.maximumConcurrentStreamsObserved = max($0.maximumConcurrentStreamsObserved, observed)
            }
        }
        return true
    }

    /// An accepted stream closed.
    func streamClosed(id: Int) {
        openStreams -= 1
        unansweredStreamIDs.remove(id)
        if draining && openStreams == 0 {
            // The stream closes while its last frames are still being written: close only after flushing them.
            let channel = self.channel
            channel.eventLoop.assumeIsolated().execute {
                channel.flush()
                channel.close(promise: nil)
            }
        }
    }

    func connectionClosed() {
        dropped = true
    }

    // MARK: Requests

    /// Decides the answer to a complete request, and carries out connection-level faults.
    func handleRequest(streamID: Int, headers: HPACKHeaders, body: ByteBuffer) -> SimulatorStreamAction {
        let dynamic = server.snapshot
        let faults = dynamic.faults
        requestsReceived += 1
        let requestNumber = server.nextRequestNumber()

        if let every = faults.resetEveryStreams, every > 0, requestNumber % every == 0 {
            dropConnection()
            server.statistics.update { $0.requestsTotal += 1; $0.resets += 1 }
            return .leaveUnanswered
        }
        if let every = faults.goAwayEveryStreams, every > 0, requestNumber % every == 0, faults.goAwayMode == .abortInFlight {
            abortWithGoAway(debugData: faults.goAwayDebugData)
            server.statistics.update { $0.requestsTotal += 1 }
            return .leaveUnanswered
        }

        let now = server.configuration.now()
        var response = decide(headers: headers, body: body, dynamic: dynamic, now: now)
        if response.status == 200 && !authenticated {
            authenticated = true
            raiseStreamLimit()
        }
        if faults.malformedAnswerRate > 0 {
            let hash = FaultHash.hash(response.apnsID, seed: faults.seed, salt: 0xBAD0 &+ UInt64(requestNumber))
            if FaultHash.unit(hash) < faults.malformedAnswerRate {
                let cases = MalformedAnswer.allCases
                response.malformation = cases[Int((hash >> 33) % UInt64(cases.count))]
                response.malformationSeed = hash >> 8
                response.ledgerEntry = nil
            }
        }
        if response.status == 200, server.configuration.ledgerEnabled, var entry = response.ledgerEntry {
            var hasher = SHA256()
            body.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            entry.payloadSHA256 = hasher.finalize()
            response.ledgerEntry = entry
        } else {
            response.ledgerEntry = nil
        }

        if let every = faults.goAwayEveryStreams, every > 0, requestNumber % every == 0, faults.goAwayMode == .noError {
            gracefulGoAway()
        }
        return .respond(response, delay: latency(faults.latency))
    }

    /// Called by the stream handler once the response is written.
    func responseWritten(_ response: SimulatorResponse, streamID: Int) {
        unansweredStreamIDs.remove(streamID)
        server.statistics.recordResponse(status: response.status, reason: response.reason)
        if let entry = response.ledgerEntry { server.ledger.record(entry) }
    }

    private func decide(headers: HPACKHeaders, body: ByteBuffer, dynamic: SimulatorServerContext.Dynamic,
                        now: Date) -> SimulatorResponse {
        let validator = SimulatorRequestValidator(
            tokenHexLength: dynamic.registry.tokenHexLength,
            allowedTopics: server.configuration.allowedTopics,
            disallowedTopics: server.configuration.disallowedTopics)
        let request: ValidatedRequest
        switch validator.validate(headers: headers, body: body, certificateTopics: certificateTopics) {
        case .failure(let rejection):
            return reject(rejection, apnsID: headers.first(name: "apns-id"))
        case .success(let validated):
            request = validated
        }
        let apnsID = request.apnsID ?? UUID().apnsIDString

        if certificateTopics == nil {
            if let rejection = authenticate(request, now: now) { return reject(rejection, apnsID: apnsID) }
        }

        switch dynamic.registry.outcome(forToken: request.token, topic: request.topic, now: now) {
        case .valid: break
        case .unregistered(let timestamp):
            return reject(.init(status: 410, reason: "Unregistered", timestampMilliseconds: timestamp), apnsID: apnsID)
        case .badDeviceToken:
            return reject(.init(status: 400, reason: "BadDeviceToken"), apnsID: apnsID)
        case .notForTopic:
            return reject(.init(status: 400, reason: "DeviceTokenNotForTopic"), apnsID: apnsID)
        }

        let faults = dynamic.faults
        if faults.needsAttemptCounting {
            let attempt = server.nextAttempt(forToken: request.token)
            if faults.tooManyRequestsTokenFraction > 0, attempt <= faults.tooManyRequestsFirstAttempts,
               FaultHash.unit(FaultHash.hash(request.token, seed: faults.seed, salt: 429)) < faults.tooManyRequestsTokenFraction {
                return reject(.init(status: 429, reason: "TooManyRequests"), apnsID: apnsID)
            }
            if faults.serverErrorRate > 0 {
                let hash = FaultHash.hash(request.token, seed: faults.seed, salt: 500 &+ UInt64(attempt))
                if FaultHash.unit(hash) < faults.serverErrorRate {
                    return hash & 1 == 0
                        ? reject(.init(status: 500, reason: "InternalServerError"), apnsID: apnsID)
                        : reject(.init(status: 503, reason: "ServiceUnavailable"), apnsID: apnsID)
                }
            }
        }

        let entry = SimulatorLedger.StoredEntry(
            token: request.token, apnsID: UUID(apnsIDString: apnsID) ?? UUID(), topic: request.topic,
            payloadSHA256: nil, receivedAt: now)
        return SimulatorResponse(status: 200, apnsID: apnsID, ledgerEntry: entry)
    }

    private func authenticate(_ request: ValidatedRequest, now: Date) -> SimulatorRejection? {
        guard let jwt = request.bearerToken else {
            return .init(status: 403, reason: request.hasAuthorizationHeader ? "InvalidProviderToken" : "MissingProviderToken")
        }
        if jwt == lastProviderToken {
            // Same token as the previous request on this connection: only its age can have changed.
            if server.authority.isExpired(issuedAt: lastProviderTokenIssuedAt, now: now) {
                return .init(status: 403, reason: "ExpiredProviderToken")
            }
            return nil
        }
        switch server.authority.authenticate(jwt: jwt, boundKeyID: boundKeyID, now: now) {
        case .accepted(let keyID, let issuedAt):
            boundKeyID = keyID
            lastProviderToken = jwt
            lastProviderTokenIssuedAt = issuedAt
            return nil
        case .rejected(let status, let reason):
            return .init(status: status, reason: reason)
        }
    }

    private func reject(_ rejection: SimulatorRejection, apnsID: String?) -> SimulatorResponse {
        SimulatorResponse(status: rejection.status, reason: rejection.reason,
                          timestampMilliseconds: rejection.timestampMilliseconds,
                          apnsID: apnsID ?? UUID().apnsIDString)
    }

    // MARK: Connection-level effects

    private func raiseStreamLimit() {
        advertisedLimit = server.configuration.streamsAfterAuth
        // The value written here is NIO's internal limit; AdvertisedStreamLimitRewriter substitutes advertisedLimit.
        let settings = HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([
            HTTP2Setting(parameter: .maxConcurrentStreams, value: SimulatorConnection.internalStreamLimit),
        ])))
        channel.write(settings, promise: nil)
    }

    private func gracefulGoAway() {
        guard !draining else { return }
        draining = true
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(
            lastStreamID: HTTP2StreamID(highestStreamID), errorCode: .noError, opaqueData: nil))
        channel.write(frame, promise: nil)
        server.statistics.update { $0.goAwaysSent += 1 }
    }

    private func abortWithGoAway(debugData: String) {
        guard !dropped else { return }
        let lowestInFlight = unansweredStreamIDs.min() ?? highestStreamID
        let lastProcessed = max(0, lowestInFlight - 2)
        dropped = true
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(
            lastStreamID: HTTP2StreamID(lastProcessed), errorCode: .noError,
            opaqueData: channel.allocator.buffer(string: debugData)))
        server.statistics.update { $0.goAwaysSent += 1 }
        let closer = abruptCloser
        channel.writeAndFlush(frame).assumeIsolated().whenComplete { _ in closer.closeAbruptly() }
    }

    private func dropConnection() {
        dropped = true
        abruptCloser.closeAbruptly()
    }

    private func latency(_ latency: SimulatorLatency) -> TimeAmount? {
        switch latency {
        case .none: return nil
        case .fixed(let duration): return .nanoseconds(Int64(duration.timeInterval * 1e9))
        case .uniform(let low, let high):
            latencyState = FaultHash.mix(latencyState)
            let fraction = FaultHash.unit(latencyState)
            let seconds = low.timeInterval + (high.timeInterval - low.timeInterval) * fraction
            return .nanoseconds(Int64(seconds * 1e9))
        }
    }

    /// What RFC 9113 lets a client assume before it has read the server's SETTINGS.
    static let limitAssumedBeforeSettings = 100

    /// NIO's own concurrent-stream limit: high, so that the simulator, not NIO, decides what to refuse.
    static let internalStreamLimit = 1 << 20
}
