import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import PGPushCore

/// The answer to one channel management stream.
struct SimulatorChannelResponse: Sendable {
    var answer: ChannelManagementAnswer
    /// Echoed (or made) `apns-request-id`.
    var requestID: String
}

/// One client connection to the broadcast channel management port: the same authentication as the device
/// port (provider token or client certificate, one stream until the first success), then
/// ``ChannelManagementAPI``. Every request is recorded in ``SimulatorChannels/requests``.
///
/// Confined to the connection's event loop, hence `@unchecked Sendable` (see ``SimulatorConnection``).
final class SimulatorChannelConnection: SimulatorRequestHandler, @unchecked Sendable {
    typealias Response = SimulatorChannelResponse

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
            channel: channel, abruptCloser: abruptCloser, statistics: server.channelStatistics, number: number,
            advertisedLimit: certificateTopics != nil ? configuration.streamsAfterAuth : configuration.streamsBeforeAuth,
            latencySeed: configuration.faults.seed)
    }

    func handleRequest(streamID: Int, headers: HPACKHeaders, body: ByteBuffer) -> SimulatorStreamAction<SimulatorChannelResponse> {
        let dynamic = server.snapshot
        let now = server.configuration.now()
        let parsed = BroadcastHeaders(headers)
        var requestID = UUID().apnsIDString
        let answer = decide(parsed, body: body, dynamic: dynamic, now: now, requestID: &requestID)
        if (200..<300).contains(answer.status) && !authenticated {
            authenticated = true
            transport.advertise(limit: server.configuration.streamsAfterAuth, flush: false)
        }
        server.channels.record(SimulatorChannelRequest(
            method: parsed.method ?? "", path: parsed.path ?? "", status: answer.status, reason: answer.reason,
            receivedAt: now))
        return .respond(SimulatorChannelResponse(answer: answer, requestID: requestID),
                        delay: transport.latency(dynamic.faults.latency))
    }

    private func decide(_ headers: BroadcastHeaders, body: ByteBuffer, dynamic: SimulatorServerContext.Dynamic,
                        now: Date, requestID: inout String) -> ChannelManagementAnswer {
        let route: (bundleID: String, operation: ChannelManagementAPI.Operation)
        switch ChannelManagementAPI.route(method: headers.method, path: headers.path ?? "") {
        case .success(let routed): route = routed
        case .failure(let rejection): return ChannelManagementAnswer(rejection)
        }
        switch BroadcastRules.requestID(headers.requestID) {
        case .success(let id): requestID = id
        case .failure(let rejection): return ChannelManagementAnswer(rejection)
        }
        if let certificateTopics {
            if !certificateTopics.isEmpty, !certificateTopics.contains(route.bundleID) {
                return ChannelManagementAnswer(status: 400, reason: "TopicDisallowed")
            }
        } else if let rejection = tokenSession.authenticate(
            bearerToken: ProviderTokenSession.bearerToken(headers.authorization),
            hasAuthorizationHeader: headers.authorization != nil, authority: server.authority, now: now) {
            return ChannelManagementAnswer(rejection)
        }
        let faults = dynamic.faults
        if let rejection = faults.channelManagement.rejection(
            requestNumber: server.counters.nextChannelRequestNumber(), seed: faults.seed, salt: 0xC4A77E1) {
            return ChannelManagementAnswer(rejection)
        }
        return ChannelManagementAPI.answer(
            route.operation, bundleID: route.bundleID, headers: headers, body: body,
            allowedTopics: certificateTopics == nil ? server.configuration.allowedTopics : nil,
            channels: server.channels, limit: server.configuration.channelLimit)
    }

    func write(_ response: SimulatorChannelResponse, streamID: Int, context: ChannelHandlerContext) {
        let answer = response.answer
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(answer.status))
        headers.add(name: "apns-request-id", value: response.requestID, indexing: .nonIndexable)
        if let channelID = answer.channelID { headers.add(name: "apns-channel-id", value: channelID, indexing: .nonIndexable) }
        let body: String? = answer.reason.map { #"{"reason":"\#($0)"}"# } ?? answer.body
        if let body {
            headers.add(name: "content-type", value: "application/json")
            context.write(NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: headers))), promise: nil)
            let buffer = context.channel.allocator.buffer(string: body)
            context.write(NIOAny(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        } else {
            context.write(NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: headers, endStream: true))), promise: nil)
        }
        server.channelStatistics.recordResponse(status: answer.status, reason: answer.reason)
    }
}
