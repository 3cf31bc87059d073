import CNGHTTP2
import NIOCore

/// One client `nghttp2_session`: the library's HTTP/2 state (streams, HPACK, flow control, SETTINGS, PING
/// and WINDOW_UPDATE answers) with bytes in and bytes out, no socket. Its callbacks reach the object behind
/// `userData`, which must outlive the session. Only the connection's event loop touches it.
final class NGHTTP2Session {
    private let session: OpaquePointer

    /// - Parameter userData: the ``NGHTTP2StreamEngine`` the callbacks report to, unretained.
    init(userData: UnsafeMutableRawPointer) throws {
        var callbacks: OpaquePointer?
        try NGHTTP2Error.check(nghttp2_session_callbacks_new(&callbacks), "session_callbacks_new")
        defer { nghttp2_session_callbacks_del(callbacks) }
        NGHTTP2Callbacks.install(on: callbacks)

        var option: OpaquePointer?
        try NGHTTP2Error.check(nghttp2_option_new(&option), "option_new")
        defer { nghttp2_option_del(option) }
        // Request headers are built from values validated where they enter pgpush, and of a response only
        // :status and the provider's few headers are read, leniently: the same choice as NIO's header
        // validation being off.
        nghttp2_option_set_no_http_messaging(option, 1)
        // Closed streams are kept only for RFC 7540 priorities, which pgpush does not use.
        nghttp2_option_set_no_closed_streams(option, 1)

        var session: OpaquePointer?
        try NGHTTP2Error.check(nghttp2_session_client_new2(&session, callbacks, userData, option), "session_client_new2")
        self.session = session!
    }

    deinit {
        nghttp2_session_del(session)
    }

    /// Queues the client's SETTINGS; the connection preface goes out with it on the next ``send(into:)``.
    func submitSettings(_ settings: [(id: nghttp2_settings_id, value: UInt32)]) throws {
        let entries = settings.map { nghttp2_settings_entry(settings_id: Int32($0.id.rawValue), value: $0.value) }
        try NGHTTP2Error.check(nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), entries, entries.count), "submit_settings")
    }

    /// Feeds decrypted bytes from the server; the callbacks run during the call.
    func receive(_ buffer: ByteBuffer) throws {
        let result = buffer.withUnsafeReadableBytes { bytes in
            nghttp2_session_mem_recv(session, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        }
        try NGHTTP2Error.check(result, "mem_recv")
    }

    /// Appends every frame the session has ready to `output` (allocated on first need), so a flush is one
    /// buffer. The library's pointer is valid only until its next call, hence the copy.
    func send(into output: inout ByteBuffer?, allocator: ByteBufferAllocator) throws {
        while true {
            var chunk: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &chunk)
            try NGHTTP2Error.check(count, "mem_send")
            guard count > 0, let chunk else { return }
            let bytes = UnsafeRawBufferPointer(start: chunk, count: count)
            if output == nil { output = allocator.buffer(capacity: max(count, 16_384)) }
            output!.writeBytes(bytes)
        }
    }

    /// Queues a request and returns its stream id, or a negative `nghttp2_error` (stream ids used up,
    /// out of memory). With `hasBody`, the body is read through the data provider's callback.
    func submitRequest(_ pairs: UnsafePointer<nghttp2_nv>, count: Int, hasBody: Bool) -> Int32 {
        guard hasBody else { return nghttp2_submit_request(session, nil, pairs, count, nil, nil) }
        var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: NGHTTP2Callbacks.readBody)
        return nghttp2_submit_request(session, nil, pairs, count, &provider, nil)
    }

    func resetStream(_ streamID: Int32, errorCode: nghttp2_error_code) {
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, errorCode.rawValue)
    }

    /// A PING whose 8 bytes are `payload` in network order, as NIO's `HTTP2PingData(withInteger:)` writes it.
    func ping(_ payload: UInt64) {
        withUnsafeBytes(of: payload.bigEndian) { bytes in
            _ = nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), bytes.baseAddress?.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// Queues a GOAWAY (NO_ERROR, last stream 0: the server opens no streams) after which the session ends:
    /// nothing not yet on the wire is sent, and the streams already open stay open until the close.
    func terminate() {
        _ = nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR.rawValue)
    }

    /// False once the session is over: a GOAWAY went out after a protocol error, or one came in and no
    /// stream is left.
    var isAlive: Bool {
        nghttp2_session_want_read(session) != 0 || nghttp2_session_want_write(session) != 0
    }
}
