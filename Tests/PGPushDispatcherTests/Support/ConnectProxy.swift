import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A small HTTP CONNECT proxy for the tests: it parses `CONNECT host:port` with NIOHTTP1, optionally checks
/// `Proxy-Authorization: Basic …`, answers 407 (wrong or missing credentials), a configured refusal, or 502
/// (the target cannot be reached), and otherwise answers 200 and splices the bytes both ways. It records every
/// CONNECT it saw.
final class ConnectProxy: Sendable {
    struct Request: Sendable, Hashable {
        /// The request target, `host:port`.
        var target: String
        /// The `Host` header.
        var host: String?
        /// The `Proxy-Authorization` header, as sent.
        var authorization: String?
        /// The status the proxy answered.
        var status: Int
    }

    private struct State {
        var server: (any Channel)?
        var children: [ObjectIdentifier: any Channel] = [:]
        var requests: [Request] = []
        /// `Basic base64(user:password)` the proxy accepts; nil accepts any request.
        var expectedAuthorization: String?
        /// Every CONNECT is answered with this status when set.
        var refusal: HTTPResponseStatus?
    }

    private let state: Mutex<State>
    private let group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton

    /// - Parameter credentials: the user name and password it requires, or nil for none.
    init(credentials: (user: String, password: String)? = nil) {
        state = Mutex(State(expectedAuthorization: credentials.map(Self.basic)))
    }

    static func basic(_ credentials: (user: String, password: String)) -> String {
        "Basic " + Data("\(credentials.user):\(credentials.password)".utf8).base64EncodedString()
    }

    /// Listens on 127.0.0.1:`port` (0: any free port); returns the port.
    @discardableResult
    func start(port: Int = 0) async throws -> Int {
        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(HTTPResponseEncoder(), name: "encoder")
                    try sync.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes)), name: "decoder")
                    try sync.addHandler(ConnectProxyHandler(proxy: self), name: "connect")
                    let id = ObjectIdentifier(channel)
                    self.state.withLock { $0.children[id] = channel }
                    channel.closeFuture.whenComplete { _ in _ = self.state.withLock { $0.children.removeValue(forKey: id) } }
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        state.withLock { $0.server = server }
        return server.localAddress?.port ?? port
    }

    /// Closes the listening socket and every connection (and so every tunnel) it holds.
    func stop() async {
        let (server, children) = state.withLock { state in
            defer { state.server = nil; state.children = [:] }
            return (state.server, Array(state.children.values))
        }
        try? await server?.close()
        for child in children { try? await child.close() }
    }

    var requests: [Request] { state.withLock { $0.requests } }

    /// Tunnels opened (CONNECTs answered 200).
    var tunnelsOpened: Int { requests.count { $0.status == 200 } }

    /// Changes the credentials the proxy requires (nil: none).
    func require(_ credentials: (user: String, password: String)?) {
        state.withLock { $0.expectedAuthorization = credentials.map(Self.basic) }
    }

    /// Answers every CONNECT with `status` (nil: tunnel as usual).
    func refuse(with status: HTTPResponseStatus?) {
        state.withLock { $0.refusal = status }
    }

    /// What to answer a CONNECT with, before trying the target: a refusal, or nil to go ahead.
    fileprivate func decide(target: String, host: String?, authorization: String?) -> HTTPResponseStatus? {
        state.withLock { state in
            var answer: HTTPResponseStatus?
            if let refusal = state.refusal {
                answer = refusal
            } else if let expected = state.expectedAuthorization, authorization != expected {
                answer = .proxyAuthenticationRequired
            }
            if let answer {
                state.requests.append(Request(target: target, host: host, authorization: authorization, status: Int(answer.code)))
            }
            return answer
        }
    }

    fileprivate func record(target: String, host: String?, authorization: String?, status: Int) {
        state.withLock { $0.requests.append(Request(target: target, host: host, authorization: authorization, status: status)) }
    }
}

/// One client connection of the proxy: the CONNECT request, then the splice.
private final class ConnectProxyHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let proxy: ConnectProxy
    private var head: HTTPRequestHead?

    init(proxy: ConnectProxy) {
        self.proxy = proxy
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body:
            break
        case .end:
            guard let head else { return }
            self.head = nil
            answer(head, context: context)
        }
    }

    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        guard head.method == .CONNECT else {
            respond(.methodNotAllowed, context: context)
            return
        }
        let target = head.uri
        let host = head.headers.first(name: "Host")
        let authorization = head.headers.first(name: "Proxy-Authorization")
        if let refusal = proxy.decide(target: target, host: host, authorization: authorization) {
            respond(refusal, context: context)
            return
        }
        guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]) else {
            proxy.record(target: target, host: host, authorization: authorization, status: 400)
            respond(.badRequest, context: context)
            return
        }
        var targetHost = String(target[..<colon])
        if targetHost.hasPrefix("["), targetHost.hasSuffix("]") { targetHost = String(targetHost.dropFirst().dropLast()) }
        let downstream = context.channel
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        // On the client connection's event loop, so both halves of the splice are set up in one go.
        ClientBootstrap(group: context.eventLoop)
            .channelInitializer { upstream in
                upstream.eventLoop.makeCompletedFuture {
                    try upstream.pipeline.syncOperations.addHandler(SpliceHandler(partner: downstream))
                }
            }
            .connect(host: targetHost, port: port)
            .whenComplete { result in
                let (handler, context) = bound.value
                switch result {
                case .success(let upstream):
                    handler.proxy.record(target: target, host: host, authorization: authorization, status: 200)
                    handler.startSplice(to: upstream, context: context)
                case .failure:
                    handler.proxy.record(target: target, host: host, authorization: authorization, status: 502)
                    handler.respond(.badGateway, context: context)
                }
            }
    }

    /// Answers 200, then swaps the HTTP handlers for the splice in the same event-loop turn, so no byte of the
    /// tunnel can reach the HTTP decoder.
    private func startSplice(to upstream: any Channel, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        do {
            let sync = context.pipeline.syncOperations
            try sync.addHandler(SpliceHandler(partner: upstream))
            sync.removeHandler(context: context, promise: nil)
            sync.removeHandler(name: "decoder", promise: nil)
            sync.removeHandler(name: "encoder", promise: nil)
        } catch {
            upstream.close(promise: nil)
            context.close(promise: nil)
        }
    }

    private func respond(_ status: HTTPResponseStatus, context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: "0")
        headers.add(name: "Connection", value: "close")
        if status == .proxyAuthenticationRequired { headers.add(name: "Proxy-Authenticate", value: "Basic realm=\"pgpush-test\"") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Writes what one side of the tunnel reads to the other, and closes the other when one side closes.
private final class SpliceHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private let partner: any Channel

    init(partner: any Channel) {
        self.partner = partner
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        partner.writeAndFlush(unwrapInboundIn(data), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        partner.close(promise: nil)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
