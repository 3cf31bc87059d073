import NIOHPACK
import PGPushCore

/// One HTTP/2 request a pool sends. The connection machinery is the same for every provider; what differs is
/// how a request's header block and body are built (here), how it is authenticated (``ProviderCredentials``) and
/// how its answer is classified (by the caller). The pool supplies `:authority` and the credential's
/// `authorization` value. Each provider's requests live under `Providers/`.
public protocol PushRequest: Sendable {
    /// The request's header block, as NIO's HPACK headers (tests, fakes, and ``headerBlock(authority:authorization:)``
    /// unless a request type writes its block itself).
    func headers(authority: String, authorization: String?) -> HPACKHeaders
    /// The request's header block as the connections send it. By default ``headers(authority:authorization:)``
    /// copied; a request sent many times a second (APNs' to a device) writes it directly.
    func headerBlock(authority: String, authorization: String?) -> HTTP2HeaderBlock
    /// The exact bytes sent as the body.
    var body: [UInt8] { get }
    /// Whether an answer keeps its body's bytes: a provider whose errors say more than a `reason` (an error
    /// object), or whose successes carry data (an OAuth token).
    static var keepsResponseBody: Bool { get }
}

extension PushRequest {
    public func headerBlock(authority: String, authorization: String?) -> HTTP2HeaderBlock {
        HTTP2HeaderBlock(headers(authority: authority, authorization: authorization))
    }
}

/// A request and what to do with its outcome, for ``HTTP2ConnectionPool/start(_:)``.
public struct PushSubmission: Sendable {
    public var request: any PushRequest
    public var onOutcome: @Sendable (ProviderOutcome) -> Void

    public init(request: any PushRequest, onOutcome: @escaping @Sendable (ProviderOutcome) -> Void) {
        self.request = request
        self.onOutcome = onOutcome
    }
}
