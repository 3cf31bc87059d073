import NIOHPACK
import PGPushCore

/// What a pool must know about the provider it talks to, and what nothing else in the transport knows: how an
/// answer reads (its delivery id, its reason), what a GOAWAY's debug data says, which answers retire a
/// connection or reject the request's token, whether token authentication starts with one stream, and what a
/// TLS refusal means to the operator. Each provider implements it in its own folder under `Providers/`; the
/// connections, streams and pool below never name one.
///
/// `description` is the pool's name in log lines ("APNs", "APNs channel management", "Google OAuth").
public protocol HTTP2ProviderRules: Sendable, CustomStringConvertible {
    /// The provider, as logs, metrics and the database name it.
    var provider: PushProvider { get }

    /// The answer to one request, from its status, its first header block and its body (up to the pool's
    /// limit). `keepsBody` is the request's ``PushRequest/keepsResponseBody``. Runs on the event loop, once
    /// per answer: one pass over `headers`.
    func response(status: Int, headers: HPACKHeaders, body: [UInt8], keepsBody: Bool) -> ProviderResponse

    /// The response header fields ``response(status:headers:body:keepsBody:)`` reads, by lowercase name. The
    /// nghttp2 engine hands it only these: a server's other fields (`date`, `server`, `content-type`) would
    /// cost two strings each, once per answer, and be thrown away.
    var responseHeaderNames: [String] { get }

    /// The reason a GOAWAY's debug data gives, if the provider writes one there.
    func goAwayReason(debugData: String) -> String?

    /// Whether the provider expects a fresh connection after `response`.
    func retiresConnection(_ response: ProviderResponse) -> Bool

    /// The reason to report to the token's source when `response` rejects the token the request carried
    /// under `credentials`, else `nil`.
    func tokenRejectionReason(_ response: ProviderResponse, credentials: ProviderCredentials) -> String?

    /// Whether a connection authenticated with `credentials` may open only one stream until a request succeeds.
    func startsWithSingleStream(_ credentials: ProviderCredentials) -> Bool

    /// The app's pause reason for a TLS failure no reconnect can fix: readable on its own, starting with
    /// ``TLSRefusal/code``, naming what the operator should check.
    func tlsRefusalReason(_ refusal: TLSRefusal) -> String
}

/// Header-name matching for the rules' one pass over an answer's header block. HTTP/2 names are lowercase on
/// the wire (RFC 9113 §8.2.1), so the exact comparison almost always decides; header validation is off, so a
/// server's uppercase spelling is still read, without lowercasing (an allocation) the usual lowercase names.
enum HTTP2HeaderName {
    static func hasUppercase(_ name: String) -> Bool {
        name.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }
    }

    /// Whether `name` is `lowercaseName` in any case.
    static func matches(_ name: String, _ lowercaseName: String) -> Bool {
        name == lowercaseName || (hasUppercase(name) && name.lowercased() == lowercaseName)
    }
}
