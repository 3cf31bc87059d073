import CNGHTTP2

/// The C callbacks of every session. A C function pointer cannot capture, so each one finds its
/// ``NGHTTP2StreamEngine`` through the session's `user_data` and hands it plain Swift values.
enum NGHTTP2Callbacks {
    static func install(on callbacks: OpaquePointer?) {
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, userData in
            guard let frame, let name, let value, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
            sessionEngine(userData).headerReceived(
                streamID: frame.pointee.hd.stream_id,
                name: UnsafeBufferPointer(start: name, count: nameLength),
                value: UnsafeBufferPointer(start: value, count: valueLength))
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, streamID, data, length, userData in
            guard let data else { return 0 }
            sessionEngine(userData).dataReceived(streamID: streamID, bytes: UnsafeBufferPointer(start: data, count: length))
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, userData in
            guard let frame else { return 0 }
            sessionEngine(userData).frameReceived(frame)
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks) { _, frame, _, userData in
            guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
            sessionEngine(userData).requestNotSent(streamID: frame.pointee.hd.stream_id)
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, userData in
            sessionEngine(userData).streamClosed(streamID: streamID, errorCode: errorCode)
            return 0
        }
    }

    /// The data provider of every request with a body: copies the next bytes of the stream's body.
    static let readBody: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
        guard let buffer, let flags else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
        return sessionEngine(userData).readBody(streamID: streamID, into: UnsafeMutableBufferPointer(start: buffer, count: length), flags: flags)
    }
}

/// The engine behind a session's `user_data`. A free function: a C callback may not capture even a metatype.
private func sessionEngine(_ userData: UnsafeMutableRawPointer?) -> NGHTTP2StreamEngine {
    Unmanaged<NGHTTP2StreamEngine>.fromOpaque(userData!).takeUnretainedValue()
}
