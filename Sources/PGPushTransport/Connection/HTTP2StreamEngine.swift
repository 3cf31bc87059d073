import Foundation
import NIOCore

/// What a connection asks of the handler that speaks HTTP/2 for it, whichever ``HTTP2Engine`` that is. Only
/// the connection's event loop calls it.
protocol HTTP2StreamEngine: AnyObject {
    /// Writes every request of `batch` on its own stream, in order, then flushes once.
    func open(_ batch: [HTTP2PendingStream])
    /// Times out every request whose deadline has passed and resets its stream.
    func sweepDeadlines(now: NIODeadline)
    func sendPing(_ payload: UInt64)
}

/// Which HTTP/2 implementation a pool's connections run under NIO SSL. Both keep the same pool, connection
/// state machine, TLS and event loops; they differ in how frames are encoded, decoded and matched to requests.
public enum HTTP2Engine: String, Sendable, CaseIterable {
    /// NIO HTTP/2's handler with pgpush's frame-level stream dispatcher.
    case nio
    /// libnghttp2 (the engine h2load runs on) in one channel handler: decrypted bytes in, frames out.
    case nghttp2

    /// libnghttp2: about half the CPU a request of NIO HTTP/2 here (BENCHMARKS.md), with the same behaviour on
    /// the wire. NIO HTTP/2 stays selectable (`pgpush worker --http2-engine nio`).
    public static let `default`: HTTP2Engine = .nghttp2
}
