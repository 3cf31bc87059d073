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
    /// The payload as received, recorded with ``ledgerEntry`` when the ledger keeps payloads.
    var ledgerPayload: String? = nil
    /// A broadcast's answer carries `apns-request-id` (and, on success, `apns-unique-id`) instead of `apns-id`.
    var broadcastHeaders: [(name: String, value: String)]? = nil
    /// Recorded in the broadcast ledger when the response is written.
    var broadcastEntry: SimulatorBroadcastEntry? = nil
    /// Set by the malformed-answer fault: written in this broken shape instead, never recorded in the ledger.
    var malformation: MalformedAnswer?
    /// Picks the variant within a malformation.
    var malformationSeed: UInt64 = 0
}

/// One APNs client connection: provider-token authentication, the limit raise after the first success,
/// APNs' validation and faults, on top of the shared ``SimulatorTransport``.
///
/// Confined to the connection's event loop (the TCP channel and all its stream channels share it), which is
/// why it is `@unchecked Sendable`: the stream initializer closure must be `Sendable` to capture it.
final class SimulatorConnection: SimulatorRequestHandler, @unchecked Sendable {
    typealias Response = SimulatorResponse

    let server: SimulatorServerContext
    let transport: SimulatorTransport
    /// `nil` on a token-auth connection; the topics the client certificate may push to otherwise (empty = any).
    let certificateTopics: [String]?

    private var authenticated: Bool
    private var tokenSession = ProviderTokenSession()

    init(server: SimulatorServerContext, channel: Channel, abruptCloser: AbruptCloseHandler,
         certificateTopics: [String]?, number: Int) {
        self.server = server
        self.certificateTopics = certificateTopics
        let configuration = server.configuration
        self.authenticated = certificateTopics != nil
        self.transport = SimulatorTransport(
            channel: channel, abruptCloser: abruptCloser, statistics: server.statistics, number: number,
            advertisedLimit: certificateTopics != nil ? configuration.streamsAfterAuth : configuration.streamsBeforeAuth,
            latencySeed: configuration.faults.seed)
    }

    // MARK: Requests

    /// Decides the answer to a complete request, and carries out connection-level faults.
    func handleRequest(streamID: Int, headers: HPACKHeaders, body: ByteBuffer) -> SimulatorStreamAction<SimulatorResponse> {
        let dynamic = server.snapshot
        let faults = dynamic.faults
        let requestNumber = server.counters.nextRequestNumber()
        let connectionFault = transport.connectionFault(requestNumber: requestNumber, faults: faults.connectionFaults)
        if case .leaveUnanswered = connectionFault { return .leaveUnanswered }

        let now = server.configuration.now()
        var response = Self.isBroadcast(headers)
            ? decideBroadcast(headers: BroadcastHeaders(headers), body: body, dynamic: dynamic, now: now)
            : decide(headers: headers, body: body, dynamic: dynamic, now: now)
        if response.status == 200 && !authenticated {
            authenticated = true
            transport.advertise(limit: server.configuration.streamsAfterAuth, flush: false)
        }
        if faults.malformedAnswerRate > 0, response.broadcastHeaders == nil {
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
            if server.ledger.keepsPayloads { response.ledgerPayload = String(buffer: body) }
        } else {
            response.ledgerEntry = nil
        }

        if case .goAwayAfterAnswer = connectionFault { transport.gracefulGoAway() }
        return .respond(response, delay: transport.latency(faults.latency))
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
            if let rejection = tokenSession.authenticate(
                bearerToken: request.bearerToken, hasAuthorizationHeader: request.hasAuthorizationHeader,
                authority: server.authority, now: now) {
                return reject(rejection, apnsID: apnsID)
            }
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
            let attempt = server.counters.nextAttempt(forToken: request.token)
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
            payloadSHA256: nil, receivedAt: now, pushType: request.pushType, priority: request.priority.map { UInt8($0) })
        return SimulatorResponse(status: 200, apnsID: apnsID, ledgerEntry: entry)
    }

    // MARK: Broadcasts

    /// Whether the request is for the broadcast endpoint (`/4/…`) rather than a device (`/3/device/…`).
    /// `:path` comes third in every client's header block, so this is a short scan.
    private static func isBroadcast(_ headers: HPACKHeaders) -> Bool {
        for (name, value, _) in headers where name == ":path" { return value.hasPrefix("/4/") }
        return false
    }

    /// `POST /4/broadcasts/apps/<bundle id>`: route, authenticate, inject the broadcast faults, then validate
    /// against the channels the management port made.
    private func decideBroadcast(headers: BroadcastHeaders, body: ByteBuffer, dynamic: SimulatorServerContext.Dynamic,
                                 now: Date) -> SimulatorResponse {
        var requestID = UUID().apnsIDString
        func answer(_ status: Int, _ reason: String?, entry: SimulatorBroadcastEntry? = nil) -> SimulatorResponse {
            var extra = [(name: "apns-request-id", value: requestID)]
            if status == 200 { extra.append((name: "apns-unique-id", value: UUID().apnsIDString)) }
            return SimulatorResponse(status: status, reason: reason, apnsID: requestID, broadcastHeaders: extra,
                                     broadcastEntry: entry)
        }
        let bundleID: String
        switch BroadcastRequestValidator.route(method: headers.method, path: headers.path ?? "") {
        case .success(let routed): bundleID = routed
        case .failure(let rejection): return answer(rejection.status, rejection.reason)
        }
        switch BroadcastRules.requestID(headers.requestID) {
        case .success(let id): requestID = id
        case .failure(let rejection): return answer(rejection.status, rejection.reason)
        }
        if let certificateTopics {
            if !certificateTopics.isEmpty, !certificateTopics.contains(bundleID) { return answer(400, "TopicDisallowed") }
        } else if let rejection = tokenSession.authenticate(
            bearerToken: ProviderTokenSession.bearerToken(headers.authorization),
            hasAuthorizationHeader: headers.authorization != nil, authority: server.authority, now: now) {
            return answer(rejection.status, rejection.reason)
        }
        let faults = dynamic.faults
        if let rejection = faults.broadcast.rejection(
            requestNumber: server.counters.nextBroadcastNumber(), seed: faults.seed, salt: 0xB10AD) {
            return answer(rejection.status, rejection.reason)
        }
        let channels = server.channels
        let validated = BroadcastRequestValidator.validate(
            headers, bundleID: bundleID, body: body,
            allowedTopics: certificateTopics == nil ? server.configuration.allowedTopics : nil,
            storagePolicy: { channels.storagePolicy(of: $0, bundleID: bundleID) })
        switch validated {
        case .failure(let rejection):
            return answer(rejection.status, rejection.reason)
        case .success(let broadcast):
            let entry = SimulatorBroadcastEntry(
                bundleID: broadcast.bundleID, channelID: broadcast.channelID, priority: broadcast.priority,
                expiration: broadcast.expiration, payload: Array(body.readableBytesView), receivedAt: now)
            return answer(200, nil, entry: entry)
        }
    }

    private func reject(_ rejection: SimulatorRejection, apnsID: String?) -> SimulatorResponse {
        SimulatorResponse(status: rejection.status, reason: rejection.reason,
                          timestampMilliseconds: rejection.timestampMilliseconds,
                          apnsID: apnsID ?? UUID().apnsIDString)
    }

    // MARK: Writing answers

    /// Writes the answer in APNs' shape (or a malformed one) and records it.
    func write(_ response: SimulatorResponse, streamID: Int, context: ChannelHandlerContext) {
        if let malformation = response.malformation {
            writeMalformed(malformation, response, streamID: streamID, context: context)
        } else {
            writeAPNsAnswer(response, context: context)
        }
        server.statistics.recordResponse(status: response.status, reason: response.reason)
        if let entry = response.ledgerEntry { server.ledger.record(entry, payload: response.ledgerPayload) }
        if let entry = response.broadcastEntry { server.broadcastLedger.record(entry) }
    }

    private func wrapOutboundOut(_ payload: HTTP2Frame.FramePayload) -> NIOAny { NIOAny(payload) }

    private func writeAPNsAnswer(_ response: SimulatorResponse, context: ChannelHandlerContext) {
        var headers = HPACKHeaders()
        headers.reserveCapacity(3)
        headers.add(name: ":status", value: Self.statusText(response.status))
        if let broadcastHeaders = response.broadcastHeaders {
            for (name, value) in broadcastHeaders { headers.add(name: name, value: value, indexing: .nonIndexable) }
        } else {
            // Unique per response: indexing it would only churn both ends' HPACK tables.
            headers.add(name: "apns-id", value: response.apnsID, indexing: .nonIndexable)
        }
        if let reason = response.reason {
            headers.add(name: "content-type", value: "application/json")
            context.write(wrapOutboundOut(.headers(.init(headers: headers))), promise: nil)
            var json = #"{"reason":"\#(reason)""#
            if let timestamp = response.timestampMilliseconds { json += #","timestamp":\#(timestamp)"# }
            json += "}"
            let buffer = context.channel.allocator.buffer(string: json)
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        } else {
            context.write(wrapOutboundOut(.headers(.init(headers: headers, endStream: true))), promise: nil)
        }
    }

    private func writeMalformed(_ malformation: MalformedAnswer, _ response: SimulatorResponse, streamID: Int,
                                context: ChannelHandlerContext) {
        let variant = Int(response.malformationSeed % 5)
        func headers(_ status: String, _ extra: [(String, String)] = []) -> HPACKHeaders {
            var headers = HPACKHeaders([(":status", status), ("apns-id", response.apnsID)])
            for (name, value) in extra { headers.add(name: name, value: value, indexing: .neverIndexed) }
            return headers
        }
        func data(_ text: String, endStream: Bool) {
            let buffer = context.channel.allocator.buffer(string: text)
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(buffer), endStream: endStream))), promise: nil)
        }
        switch malformation {
        case .unknownStatus:
            let status = ["299", "418", "451", "520", "999"][variant]
            context.write(wrapOutboundOut(.headers(.init(headers: headers(status, [("content-type", "application/json")])))), promise: nil)
            data(#"{"reason":"Teapot"}"#, endStream: true)
        case .badReasonBody:
            let body = ["{not json", #"{"reason":42}"#, "", #"{"reason":"\#(String(repeating: "x", count: 65_536))"}"#, "[1,2"][variant]
            context.write(wrapOutboundOut(.headers(.init(headers: headers("400", [("content-type", "application/json")])))), promise: nil)
            data(body, endStream: true)
        case .hugeHeader:
            context.write(wrapOutboundOut(.headers(.init(
                headers: headers("200", [("x-padding", String(repeating: "p", count: 20_000))]), endStream: true))), promise: nil)
        case .trailers:
            context.write(wrapOutboundOut(.headers(.init(headers: headers("400", [("content-type", "application/json")])))), promise: nil)
            data(#"{"reason":"BadDeviceToken"}"#, endStream: false)
            context.write(wrapOutboundOut(.headers(.init(headers: HPACKHeaders([("x-trailer", "1")]), endStream: true))), promise: nil)
        case .dataAfterEndStream:
            context.write(wrapOutboundOut(.headers(.init(headers: headers("200"), endStream: true))), promise: nil)
            context.flush()
            // Below the HTTP/2 handler, which would refuse a frame on a closed stream: raw bytes of a DATA frame.
            guard let parent = context.channel.parent,
                  let below = try? parent.pipeline.syncOperations.context(handlerType: NIOHTTP2Handler.self)
            else { return }
            var frame = context.channel.allocator.buffer(capacity: 16)
            let payload: [UInt8] = Array("late".utf8)
            frame.writeBytes([UInt8(0), UInt8(0), UInt8(payload.count)])  // 24-bit length
            frame.writeInteger(UInt8(0x0))  // type DATA
            frame.writeInteger(UInt8(0x1))  // flags END_STREAM
            frame.writeInteger(UInt32(streamID) & 0x7FFF_FFFF)
            frame.writeBytes(payload)
            below.write(NIOAny(frame), promise: nil)
            below.flush()
        }
    }

    private static func statusText(_ status: Int) -> String {
        switch status {
        case 200: "200"
        case 400: "400"
        case 403: "403"
        case 410: "410"
        default: String(status)
        }
    }
}
