import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2

/// One HTTP/2 Web Push connection on top of the shared ``SimulatorTransport`` (stream limit, GOAWAY and reset
/// faults, latency): hands each stream to ``WebPushSimulatorContext/answer(_:dynamic:now:)`` and writes the
/// answer.
///
/// Confined to the connection's event loop, hence `@unchecked Sendable` (see ``SimulatorTransport``).
final class WebPushHTTP2Connection: SimulatorRequestHandler, @unchecked Sendable {
    typealias Response = WebPushSimulatorResponse

    let server: WebPushSimulatorContext
    let transport: SimulatorTransport

    init(server: WebPushSimulatorContext, channel: Channel, abruptCloser: AbruptCloseHandler, number: Int) {
        self.server = server
        self.transport = SimulatorTransport(
            channel: channel, abruptCloser: abruptCloser, statistics: server.statistics, number: number,
            advertisedLimit: max(0, server.configuration.maxConcurrentStreams), latencySeed: server.configuration.faults.seed)
        server.statistics.update { $0.http2Connections += 1 }
    }

    func handleRequest(streamID: Int, headers: HPACKHeaders, body: ByteBuffer) -> SimulatorStreamAction<WebPushSimulatorResponse> {
        let dynamic = server.snapshot
        let faults = dynamic.faults
        let requestNumber = server.counters.nextRequestNumber()
        let connectionFault = transport.connectionFault(requestNumber: requestNumber, faults: faults.connectionFaults)
        if case .leaveUnanswered = connectionFault { return .leaveUnanswered }

        var fields: [String: String] = [:]
        for (name, value, _) in headers where !name.hasPrefix(":") && fields[name] == nil {
            fields[name] = value
        }
        let request = WebPushRequest(
            method: headers.first(name: ":method") ?? "", path: headers.first(name: ":path") ?? "",
            version: .http2, headers: fields, body: body)
        let response = server.answer(request, dynamic: dynamic, now: server.configuration.now())
        if case .goAwayAfterAnswer = connectionFault { transport.gracefulGoAway() }
        return .respond(response, delay: transport.latency(faults.latency))
    }

    func write(_ response: WebPushSimulatorResponse, streamID: Int, context: ChannelHandlerContext) {
        var headers = HPACKHeaders()
        headers.reserveCapacity(5)
        headers.add(name: ":status", value: String(response.status))
        if let location = response.location { headers.add(name: "location", value: location) }
        if let ttl = response.ttl { headers.add(name: "ttl", value: String(ttl)) }
        if let seconds = response.retryAfterSeconds { headers.add(name: "retry-after", value: String(seconds)) }
        let body = response.body
        if body.isEmpty {
            context.write(NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: headers, endStream: true))), promise: nil)
        } else {
            headers.add(name: "content-type", value: "application/json")
            let buffer = context.channel.allocator.buffer(string: body)
            context.write(NIOAny(HTTP2Frame.FramePayload.headers(.init(headers: headers))), promise: nil)
            context.write(NIOAny(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(buffer), endStream: true))), promise: nil)
        }
        server.recordWritten(response, version: .http2)
    }
}
