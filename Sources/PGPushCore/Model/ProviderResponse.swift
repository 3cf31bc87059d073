import struct Foundation.UUID

/// An HTTP response a provider (APNs, FCM, an OAuth token endpoint) sent for one request.
public struct ProviderResponse: Sendable, Hashable {
    /// The `:status` pseudo-header.
    public var status: Int
    /// `reason` from APNs' JSON error body; `nil` on success, and for providers whose error bodies have no
    /// top-level `reason` (FCM, OAuth endpoints).
    public var reason: String?
    /// `timestamp` from a 410 body: milliseconds since the UNIX epoch when APNs last knew the token was valid.
    public var timestampMilliseconds: Int64?
    /// The `apns-id` response header.
    public var apnsID: UUID?
    /// The `retry-after` response header, as sent (FCM sends it with 429 and 503).
    public var retryAfter: String?
    /// The `apns-channel-id` response header: the new channel's id in the answer to a broadcast channel's
    /// creation (the id travels in this header, never in the body).
    public var channelID: String?
    /// The response body, up to the transport's limit: the error object of a provider whose answers the
    /// fields above do not describe (FCM's `{"error": …}`), or a success's body (an OAuth token).
    public var body: [UInt8]

    public init(status: Int, reason: String? = nil, timestampMilliseconds: Int64? = nil, apnsID: UUID? = nil,
                retryAfter: String? = nil, channelID: String? = nil, body: [UInt8] = []) {
        self.status = status
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
        self.apnsID = apnsID
        self.retryAfter = retryAfter
        self.channelID = channelID
        self.body = body
    }
}

/// Why a request ended without an HTTP response. Each case says whether the provider may have processed it.
public enum ProviderNoResponseReason: Sendable, Hashable {
    /// The stream id was above a GOAWAY's last-stream-id: APNs did not process it. `debugReason` is the
    /// JSON `reason` from the GOAWAY debug data, when there was one.
    case goAwayNotProcessed(debugReason: String?)
    /// The server reset the stream with REFUSED_STREAM: not processed.
    case refusedStream
    /// The stream or connection closed before a response with `:status` arrived: outcome unknown.
    case connectionClosed
    /// A response arrived without a `:status` pseudo-header.
    case missingStatus
    /// The request's deadline passed before a response arrived: outcome unknown.
    case timeout
    /// No connection could be established (DNS, refused, reset, timeout); the request was never written.
    case connectFailed(detail: String)
    /// The TLS handshake failed in a way reconnecting cannot fix (a certificate expired, revoked, refused or
    /// not trusted); the request was never written. `reason` is readable and holds no secret.
    case tlsRejected(reason: String)
    /// The credential for the request could not be had because its issuer refused it (an OAuth token
    /// endpoint refused the service account's assertion); the request was never written.
    case credentialRefused(reason: String)
    /// pgpush refused to send the request and never will: a Web Push endpoint outside the allowed origins, a
    /// message that cannot be encrypted for its subscription. No connection was made. `reason` is recorded.
    case notSent(reason: String)
}

/// The result of sending one request: a response, or the reason none came.
public enum ProviderOutcome: Sendable, Hashable {
    case response(ProviderResponse)
    case noResponse(ProviderNoResponseReason)

    /// The HTTP status to record, 0 when no response ever came.
    public var status: Int {
        if case .response(let response) = self { return response.status }
        return 0
    }
}
