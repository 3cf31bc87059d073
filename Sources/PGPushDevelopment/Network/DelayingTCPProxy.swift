import NIOCore
import NIOPosix
import Synchronization

/// A TCP proxy on 127.0.0.1 that holds every byte for a fixed time in each direction: a database "one network
/// hop away" on a kernel without netem. `roundTrip` is split evenly between the two directions, so a query
/// and its answer take `roundTrip` longer than on loopback. Bytes keep their order; nothing else changes.
///
/// For benchmarks only: it buffers without back-pressure.
public final class DelayingTCPProxy: Sendable {
    public let roundTrip: Duration
    private let group: MultiThreadedEventLoopGroup
    private let listener: any Channel

    /// The port it listens on, on 127.0.0.1.
    public var port: Int { listener.localAddress?.port ?? 0 }

    /// Starts a proxy to `targetHost:targetPort`.
    public init(targetHost: String = "127.0.0.1", targetPort: Int, roundTrip: Duration) async throws {
        self.roundTrip = roundTrip
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.group = group
        let roundTripNanoseconds = roundTrip.components.seconds * 1_000_000_000 + roundTrip.components.attoseconds / 1_000_000_000
        let oneWay = TimeAmount.nanoseconds(roundTripNanoseconds / 2)
        listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { inbound in
                // Reads wait until the other side is connected; then each direction is delayed alike.
                inbound.setOption(.autoRead, value: false).flatMap {
                    ClientBootstrap(group: inbound.eventLoop)
                        .channelOption(.socketOption(.tcp_nodelay), value: 1)
                        .channelInitializer { outbound in
                            outbound.pipeline.addHandler(DelayedRelay(peer: inbound, delay: oneWay))
                        }
                        .connect(host: targetHost, port: targetPort)
                        .flatMap { outbound in
                            inbound.pipeline.addHandler(DelayedRelay(peer: outbound, delay: oneWay)).flatMap {
                                inbound.setOption(.autoRead, value: true)
                            }
                        }
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
    }

    /// Closes the listener and every relayed connection.
    public func shutdown() async {
        try? await listener.close()
        try? await group.shutdownGracefully()
    }
}

/// Forwards what one side reads to `peer` after `delay`, and closes `peer` (after the bytes before it) when
/// this side closes. Both sides of a connection live on one event loop, so no lock is needed.
private final class DelayedRelay: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    private let peer: any Channel
    private let delay: TimeAmount

    init(peer: any Channel, delay: TimeAmount) {
        self.peer = peer
        self.delay = delay
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data)
        let peer = self.peer
        context.eventLoop.scheduleTask(in: delay) {
            peer.writeAndFlush(bytes, promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        let peer = self.peer
        context.eventLoop.scheduleTask(in: delay) {
            peer.close(promise: nil)
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
