import PGPushCore

/// Connection-level events that the pool feeds into the connection's state machine.
enum HTTP2ConnectionEvent: Sendable {
    /// A SETTINGS frame; `maxConcurrentStreams` is `nil` when it did not carry that setting.
    case settings(maxConcurrentStreams: Int?)
    case goAway(lastStreamID: Int, errorCode: UInt32, debugData: String?)
    case pingAck(UInt64)
    /// The channel closed; `error` describes why when it failed (TLS handshake, ALPN, reset), and
    /// `tlsRefusal` is set when that failure is one a reconnect cannot fix (see ``TLSRefusal``).
    case closed(error: String?, tlsRefusal: TLSRefusal?)
}

/// How one stream ended, before the connection interprets what a missing response means.
enum HTTP2StreamResult: Sendable {
    case response(ProviderResponse)
    /// The stream closed without a complete response.
    /// - streamID: `nil` if the request never reached the wire.
    /// - resetCode: the RST_STREAM error code, if the stream was reset.
    /// - sawHeadersWithoutStatus: response headers came but had no `:status`.
    case closed(streamID: Int?, resetCode: UInt32?, sawHeadersWithoutStatus: Bool)
    /// The request deadline passed; the stream was reset.
    case timedOut
}
