import NIOHPACK
import PGPushCore
import PGPushTransport

/// One Web Push message as an HTTP/2 pool sends it (RFC 8030 §5): `POST` to the endpoint's path with the
/// encrypted body, its `TTL`, `Urgency` and `Topic`, and the app's VAPID `Authorization`. The pool's
/// credentials are `.none`: VAPID authenticates each request, not the connection, so one pool per origin serves
/// every app.
struct WebPushWireRequest: PushRequest {
    /// The endpoint's path and query: the subscription's opaque name at its push service.
    var path: String
    var timeToLive: Int
    var urgency: WebPushUrgency?
    var topic: WebPushTopic?
    /// `vapid t=<jwt>, k=<key>`: the same for every message of an app to one origin, so HPACK sends it once a
    /// connection.
    var authorization: String
    var body: [UInt8]

    /// `message`, encrypted to `body`, signed with `token`.
    init(_ message: WebPushMessage, body: [UInt8], token: VAPIDToken) {
        self.path = Self.path(of: message.subscription.endpoint)
        self.timeToLive = message.timeToLive
        self.urgency = message.urgency
        self.topic = message.topic
        self.authorization = token.authorization
        self.body = body
    }

    func headers(authority: String, authorization: String?) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(11)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        // Each subscription has its own path: worth no room in the HPACK table.
        headers.add(name: ":path", value: path, indexing: .nonIndexable)
        headers.add(name: ":authority", value: authority)
        // The fields of WebPushMessage.headers(authorization:), named in lowercase as HTTP/2 requires
        // (RFC 9113 §8.2.1).
        headers.add(name: "ttl", value: String(timeToLive))
        headers.add(name: "content-encoding", value: WebPushEncryption.contentEncoding)
        headers.add(name: "content-type", value: "application/octet-stream")
        headers.add(name: "authorization", value: self.authorization)
        if let urgency { headers.add(name: "urgency", value: urgency.rawValue) }
        if let topic { headers.add(name: "topic", value: topic.value) }
        headers.add(name: "content-length", value: String(body.count), indexing: .nonIndexable)
        return headers
    }

    /// A push service's error says little; its reason is read from the body up to the pool's limit either way.
    static var keepsResponseBody: Bool { false }

    /// The path and query of an absolute `https` URL (whose form ``WebPushSubscription`` checked): what follows
    /// the authority, `/` when nothing does; a fragment is never sent.
    static func path(of endpoint: String) -> String {
        var rest = Substring(endpoint)
        if let scheme = rest.range(of: "://") { rest = rest[scheme.upperBound...] }
        if let fragment = rest.firstIndex(of: "#") { rest = rest[..<fragment] }
        guard let start = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) else { return "/" }
        let path = rest[start...]
        return path.first == "?" ? "/" + path : String(path)
    }
}
