import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import PGPushCore

/// Why a tunnel through the HTTP proxy did not open. It names the proxy by its ``HTTPProxyConfiguration/redactedURL``
/// and never carries the credentials.
public struct HTTPProxyError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// No TCP connection to the proxy: refused, unresolvable, timed out.
        case unreachable(String)
        /// The proxy answered `CONNECT` with a status other than 2xx (407, 403, 502, …).
        case refused(status: Int, reason: String)
        /// The proxy closed the connection (or it failed) before a complete answer.
        case closed(String?)
        /// No answer within the connect timeout.
        case timedOut
        /// The answer was not HTTP.
        case malformed(String)
    }

    public var kind: Kind
    /// The proxy, redacted: `http://***@host:port`.
    public var proxy: String
    /// The `CONNECT` target, `host:port`.
    public var target: String

    /// The proxy's answer in a few words, for log metadata: `407 Proxy Authentication Required`,
    /// `connection refused`, …
    public var status: String {
        switch kind {
        case .unreachable(let detail): detail
        case .refused(let status, let reason): reason.isEmpty ? "\(status)" : "\(status) \(reason)"
        case .closed(let detail): "closed the connection before answering" + (detail.map { " (\($0))" } ?? "")
        case .timedOut: "no answer within the connect timeout"
        case .malformed(let detail): "not an HTTP answer (\(detail))"
        }
    }

    public var description: String {
        switch kind {
        case .unreachable:
            "HTTPS proxy \(proxy) is unreachable: \(status)"
        case .refused(407, _):
            "HTTPS proxy \(proxy) refused CONNECT \(target): \(status) (check the user name and password in the proxy URL)"
        case .refused:
            "HTTPS proxy \(proxy) refused CONNECT \(target): \(status)"
        case .closed, .timedOut, .malformed:
            "HTTPS proxy \(proxy) did not open a tunnel to \(target): \(status)"
        }
    }
}

/// Opens a TCP connection to an HTTP proxy and asks it for a tunnel with `CONNECT host:port HTTP/1.1`, using
/// NIOHTTP1's client encoder and decoder; once the proxy answers 2xx they are taken out of the pipeline and the
/// channel carries the tunnel's raw bytes, ready for TLS.
enum HTTPConnectTunnel {
    static let encoderName = "pgpush.proxy.encoder"
    static let decoderName = "pgpush.proxy.decoder"
    static let handlerName = "pgpush.proxy.connect"

    /// A channel tunnelled to `target` through `proxy`, its pipeline empty; the TCP connect and the proxy's answer
    /// together may take `timeout`.
    ///
    /// - Throws: ``HTTPProxyError`` for everything that went wrong before the tunnel opened.
    static func open(
        through proxy: HTTPProxyConfiguration,
        to target: ProviderEndpoint,
        eventLoop: any EventLoop,
        timeout: Duration,
        configure: @escaping @Sendable (ClientBootstrap) -> ClientBootstrap = { $0 }
    ) async throws -> any Channel {
        let authority = target.host.contains(":") ? "[\(target.host)]:\(target.port)" : "\(target.host):\(target.port)"
        let redacted = proxy.redactedURL
        let makeError: @Sendable (HTTPProxyError.Kind) -> HTTPProxyError = {
            HTTPProxyError(kind: $0, proxy: redacted, target: authority)
        }
        let deadline = NIODeadline.now() + .nanoseconds(timeout.nanosecondsInt64)
        let established = eventLoop.makePromise(of: Void.self)
        let authorization = proxy.proxyAuthorization
        let bootstrap = configure(ClientBootstrap(group: eventLoop))
            .connectTimeout(.nanoseconds(timeout.nanosecondsInt64))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(HTTPRequestEncoder(), name: encoderName)
                    // The decoder watches the request go out, so it knows the answer is to CONNECT (no body).
                    try sync.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)), name: decoderName)
                    try sync.addHandler(
                        HTTPConnectHandler(
                            authority: authority, authorization: authorization, deadline: deadline, established: established,
                            makeError: makeError),
                        name: handlerName)
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(host: proxy.host, port: proxy.port).get()
        } catch {
            let failure = makeError(.unreachable(describeConnectError(error)))
            established.fail(failure)
            throw failure
        }
        do {
            try await established.futureResult.get()
            // The 2xx answer's last byte was read; the provider's TLS server says nothing before our ClientHello,
            // so nothing of the tunnel can be in flight while the HTTP handlers leave.
            try await channel.eventLoop.flatSubmit {
                let sync = channel.pipeline.syncOperations
                let removals = [handlerName, decoderName, encoderName].map { sync.removeHandler(name: $0) }
                return EventLoopFuture.andAllSucceed(removals, on: channel.eventLoop)
            }.get()
            return channel
        } catch {
            channel.close(promise: nil)
            if let error = error as? HTTPProxyError { throw error }
            throw makeError(.closed(String(describing: error)))
        }
    }

    /// A connect error in a few words: `connection refused`, `connection timed out`, `cannot resolve proxy.example`.
    static func describeConnectError(_ error: any Error) -> String {
        if let error = error as? NIOConnectionError {
            if let first = error.connectionErrors.first { return describeConnectError(first.error) }
            if error.dnsAError != nil || error.dnsAAAAError != nil { return "cannot resolve \(error.host)" }
            return "cannot connect to \(error.host):\(error.port)"
        }
        if let error = error as? IOError {
            return String(cString: strerror(error.errnoCode)).lowercased()
        }
        if let error = error as? ChannelError, case .connectTimeout = error {
            return "connection timed out"
        }
        return String(describing: error)
    }
}

/// Sends `CONNECT` once the channel is active and completes `established` when a 2xx answer has ended; fails it
/// with an ``HTTPProxyError`` (and closes the channel) on any other answer, a close, an error or the deadline.
final class HTTPConnectHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = Never
    typealias OutboundOut = HTTPClientRequestPart

    private enum State {
        case idle
        case awaitingHead
        case awaitingEnd
        case done
    }

    private var state = State.idle
    private let authority: String
    private let authorization: String?
    private let deadline: NIODeadline
    private let established: EventLoopPromise<Void>
    private let makeError: @Sendable (HTTPProxyError.Kind) -> HTTPProxyError
    private var timeout: Scheduled<Void>?

    init(
        authority: String, authorization: String?, deadline: NIODeadline, established: EventLoopPromise<Void>,
        makeError: @escaping @Sendable (HTTPProxyError.Kind) -> HTTPProxyError
    ) {
        self.authority = authority
        self.authorization = authorization
        self.deadline = deadline
        self.established = established
        self.makeError = makeError
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { sendConnect(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timeout?.cancel()
        if state != .done {
            state = .done
            established.fail(makeError(.closed(nil)))
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendConnect(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(.closed(nil), context: context)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The handshake is this handler's: its errors end it here rather than travel on.
        if error is HTTPParserError || error is NIOHTTPDecoderError {
            fail(.malformed(String(describing: error)), context: context)
        } else {
            fail(.closed(HTTPConnectTunnel.describeConnectError(error)), context: context)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            guard state == .awaitingHead else { return }
            let code = Int(head.status.code)
            if (200..<300).contains(code) {
                state = .awaitingEnd
            } else {
                fail(.refused(status: code, reason: Self.printable(head.status.reasonPhrase)), context: context)
            }
        case .body:
            // Never decoded for an answer to CONNECT; an answer that is not 2xx has already failed.
            break
        case .end:
            guard state == .awaitingEnd else { return }
            state = .done
            timeout?.cancel()
            established.succeed(())
        }
    }

    private func sendConnect(context: ChannelHandlerContext) {
        guard state == .idle else { return }
        state = .awaitingHead
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeout = context.eventLoop.scheduleTask(deadline: deadline) {
            let (handler, context) = loopBound.value
            handler.fail(.timedOut, context: context)
        }
        var head = HTTPRequestHead(version: .http1_1, method: .CONNECT, uri: authority)
        head.headers.add(name: "Host", value: authority)
        if let authorization { head.headers.add(name: "Proxy-Authorization", value: authorization) }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    private func fail(_ kind: HTTPProxyError.Kind, context: ChannelHandlerContext) {
        guard state != .done else { return }
        state = .done
        timeout?.cancel()
        established.fail(makeError(kind))
        context.close(promise: nil)
    }

    /// A reason phrase as the proxy sent it, printable ASCII only and short: it goes into log lines.
    static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.filter { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F }).prefix(80))
    }
}
