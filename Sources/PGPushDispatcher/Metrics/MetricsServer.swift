import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ServiceLifecycle
import Synchronization

/// Serves `/metrics` (Prometheus text format), `/healthz` (the worker still reaches the database and is not
/// wedged) and `/readyz` (the database is reachable, the worker is not draining and, behind an HTTP proxy, the
/// providers are reachable through it; a 503 says why) over plain HTTP/1.1.
public final class MetricsServer: Service, Sendable {
    public let host: String
    public let port: Int
    let registry: PrometheusCollectorRegistry
    let isReady: @Sendable () -> Bool
    let isHealthy: @Sendable () -> Bool
    /// Why `/readyz` answers 503, put in its body; `nil` says only "not ready".
    let notReadyReason: @Sendable () -> String?
    let logger: Logger
    private let boundPort = Mutex<Int?>(nil)

    public init(
        host: String, port: Int, registry: PrometheusCollectorRegistry, logger: Logger,
        isReady: @escaping @Sendable () -> Bool, isHealthy: @escaping @Sendable () -> Bool = { true },
        notReadyReason: @escaping @Sendable () -> String? = { nil }
    ) {
        self.host = host
        self.port = port
        self.registry = registry
        self.logger = logger
        self.isReady = isReady
        self.isHealthy = isHealthy
        self.notReadyReason = notReadyReason
    }

    /// The port actually bound (useful with port 0).
    public var localPort: Int? { boundPort.withLock { $0 } }

    /// The listening socket could not be opened, e.g. another process holds the port; names the address.
    public struct BindError: Error, CustomStringConvertible {
        public let host: String
        public let port: Int
        public let underlying: any Error

        public var description: String { "cannot listen on \(host):\(port): \(underlying)" }
    }

    public func run() async throws {
        let channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>
        do {
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                        return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch {
            throw BindError(host: host, port: port, underlying: error)
        }
        boundPort.withLock { $0 = channel.channel.localAddress?.port }
        logger.info("metrics server listening", metadata: ["address": "\(host):\(channel.channel.localAddress?.port ?? port)"])
        do {
            try await cancelWhenGracefulShutdown {
                try await withThrowingDiscardingTaskGroup { group in
                    try await channel.executeThenClose { connections in
                        for try await connection in connections {
                            group.addTask { try? await self.serve(connection) }
                        }
                    }
                }
            }
        } catch where Task.isCancelled || Task.isShuttingDownGracefully || error is CancellationError {
            // Stopping is the normal end of a server: the worker must still exit 0 after SIGTERM.
        }
    }

    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async throws {
        try await connection.executeThenClose { inbound, outbound in
            var path = "/"
            for try await part in inbound {
                switch part {
                case .head(let head):
                    path = String(head.uri.split(separator: "?").first ?? "/")
                case .body:
                    continue
                case .end:
                    let (status, contentType, body) = respond(to: path)
                    var headers = HTTPHeaders()
                    headers.add(name: "Content-Type", value: contentType)
                    headers.add(name: "Content-Length", value: String(body.readableBytes))
                    try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)))
                    try await outbound.write(.body(.byteBuffer(body)))
                    try await outbound.write(.end(nil))
                }
            }
        }
    }

    private func respond(to path: String) -> (HTTPResponseStatus, String, ByteBuffer) {
        switch path {
        case "/metrics":
            return (.ok, "text/plain; version=0.0.4; charset=utf-8", ByteBuffer(bytes: registry.emitToBuffer()))
        case "/healthz":
            return isHealthy()
                ? (.ok, "text/plain", ByteBuffer(string: "ok\n"))
                : (.serviceUnavailable, "text/plain", ByteBuffer(string: "unhealthy: no database contact or a stuck claim loop\n"))
        case "/readyz":
            return isReady()
                ? (.ok, "text/plain", ByteBuffer(string: "ready\n"))
                : (.serviceUnavailable, "text/plain", ByteBuffer(string: "not ready\(notReadyReason().map { ": \($0)" } ?? "")\n"))
        default:
            return (.notFound, "text/plain", ByteBuffer(string: "not found\n"))
        }
    }
}
