import Foundation
import NIOCore
import NIOHTTP1
import PGPushCore

/// One HTTP/1.1 Web Push connection, behind NIO's HTTP/1 server codec with pipelining assistance (so answers
/// go out in order and keep-alive works as HTTP/1.1 says): collects each request, hands it to
/// ``WebPushSimulatorContext/answer(_:dynamic:now:)``, and writes the answer.
///
/// The connection-level faults act as on HTTP/2 where they can: a reset drops the connection unanswered, a
/// GOAWAY in `noError` mode answers with `Connection: close` and closes, in `abortInFlight` mode drops it.
/// Confined to the connection's event loop.
final class WebPushHTTP1Handler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// Bodies are read up to this size; a longer one is answered 413 without keeping the rest.
    static let readLimit = 64 * 1024

    private let server: WebPushSimulatorContext
    private let abruptCloser: AbruptCloseHandler
    private var latencyState: UInt64
    private var head: HTTPRequestHead?
    private var body: ByteBuffer?
    private var bodyTruncated = false
    private var dropped = false

    init(server: WebPushSimulatorContext, abruptCloser: AbruptCloseHandler, number: Int) {
        self.server = server
        self.abruptCloser = abruptCloser
        self.latencyState = FaultHash.mix(server.configuration.faults.seed ^ UInt64(number))
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !dropped else { return }
        switch unwrapInboundIn(data) {
        case .head(let requestHead):
            head = requestHead
            body = nil
            bodyTruncated = false
        case .body(var chunk):
            guard !bodyTruncated else { return }
            if (body?.readableBytes ?? 0) + chunk.readableBytes > Self.readLimit {
                bodyTruncated = true
                body = nil
            } else if body == nil {
                body = chunk
            } else {
                body!.writeBuffer(&chunk)
            }
        case .end:
            requestComplete(context: context)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        dropped = true
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func requestComplete(context: ChannelHandlerContext) {
        guard let head else { return }
        self.head = nil
        let dynamic = server.snapshot
        let faults = dynamic.faults
        let requestNumber = server.counters.nextRequestNumber()
        if let every = faults.resetEveryStreams, every > 0, requestNumber % every == 0 {
            server.statistics.update {
                $0.requestsTotal += 1
                $0.resets += 1
            }
            drop()
            return
        }
        var closeAfterAnswer = !head.isKeepAlive
        if let every = faults.goAwayEveryStreams, every > 0, requestNumber % every == 0 {
            server.statistics.update {
                $0.goAwaysSent += 1
                if faults.goAwayMode == .abortInFlight { $0.requestsTotal += 1 }
            }
            guard faults.goAwayMode == .noError else {
                drop()
                return
            }
            closeAfterAnswer = true
        }

        var fields: [String: String] = [:]
        for (name, value) in head.headers {
            let name = name.lowercased()
            if fields[name] == nil { fields[name] = value }
        }
        let request = WebPushRequest(
            method: head.method.rawValue, path: head.uri, version: .http1_1, headers: fields,
            body: body ?? context.channel.allocator.buffer(capacity: 0), bodyTruncated: bodyTruncated)
        body = nil
        let response = server.answer(request, dynamic: dynamic, now: server.configuration.now())
        let version = head.version
        guard let delay = latency(faults.latency) else {
            write(response, version: version, close: closeAfterAnswer, context: context)
            return
        }
        let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
            self.write(response, version: version, close: closeAfterAnswer, context: loopBoundContext.value)
        }
    }

    private func write(_ response: WebPushSimulatorResponse, version: HTTPVersion, close: Bool,
                       context: ChannelHandlerContext) {
        guard !dropped else { return }
        // Ledgered before the flush: a client that has read the answer must find the message in the ledger.
        server.recordWritten(response, version: .http1_1)
        let body = response.body
        var headers = HTTPHeaders()
        headers.reserveCapacity(6)
        headers.add(name: "content-length", value: String(body.utf8.count))
        if !body.isEmpty { headers.add(name: "content-type", value: "application/json") }
        if let location = response.location { headers.add(name: "location", value: location) }
        if let ttl = response.ttl { headers.add(name: "ttl", value: String(ttl)) }
        if let seconds = response.retryAfterSeconds { headers.add(name: "retry-after", value: String(seconds)) }
        if close { headers.add(name: "connection", value: "close") }
        let responseHead = HTTPResponseHead(version: version, status: .init(statusCode: response.status), headers: headers)
        context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
        if !body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
        }
        let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if close {
            written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    /// Closes the TCP connection without an answer or TLS close_notify, like a network failure.
    private func drop() {
        dropped = true
        abruptCloser.closeAbruptly()
    }

    /// The delay before the next answer, drawn from this connection's seeded sequence.
    private func latency(_ latency: SimulatorLatency) -> TimeAmount? {
        switch latency {
        case .none: return nil
        case .fixed(let duration): return .nanoseconds(Int64(duration.inSeconds * 1e9))
        case .uniform(let low, let high):
            latencyState = FaultHash.mix(latencyState)
            let seconds = low.inSeconds + (high.inSeconds - low.inSeconds) * FaultHash.unit(latencyState)
            return .nanoseconds(Int64(seconds * 1e9))
        }
    }
}
