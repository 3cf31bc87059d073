import struct Foundation.URL

/// The origin of a push endpoint, `https://host[:port]`: what a VAPID token's `aud` names, what connections are
/// pooled by, and what the allow-list (``WebPushOrigins``) checks.
///
/// Normalised so that one origin has one spelling: the host is lowercased, the port is left out when it is 443,
/// and an IPv6 address is kept in brackets. The scheme is always `https`.
public struct WebPushOrigin: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The host, lowercased: a DNS name, an IPv4 address, or an IPv6 address in brackets (`[::1]`).
    public let host: String
    /// The TCP port; 443 unless the URL says otherwise.
    public let port: Int
    /// `https://host` or `https://host:port`.
    public let serialized: String

    /// - Throws: ``WebPushError/Code/invalidOrigin`` for a host that is not a DNS name or IP address, or a port
    ///   outside 1…65535.
    public init(host: String, port: Int = 443) throws(WebPushError) {
        guard let normalised = Self.normalisedHost(host) else {
            throw WebPushError(.invalidOrigin, field: "origin", "the origin's host is not a DNS name or an IP address")
        }
        guard (1...65_535).contains(port) else {
            throw WebPushError(.invalidOrigin, field: "origin", "the origin's port is not in 1…65535")
        }
        self.init(checkedHost: normalised, port: port)
    }

    private init(checkedHost host: String, port: Int) {
        self.host = host
        self.port = port
        self.serialized = port == 443 ? "https://" + host : "https://" + host + ":" + String(port)
    }

    /// Parses an origin as an operator writes it: `https://host[:port]`, optionally with a trailing `/`.
    ///
    /// - Throws: ``WebPushError/Code/invalidOrigin``, quoting `text` (an operator's setting, not a secret).
    public init(parsing text: String) throws(WebPushError) {
        var trimmed = Substring(text)
        if trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        let invalid = WebPushError(
            .invalidOrigin, field: "origin",
            "\"\(text)\" is not an origin of the form https://host[:port] (no path, query or user info)"
        )
        guard trimmed.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
              let url = URL(string: String(trimmed)),
              url.scheme?.lowercased() == "https",
              url.path(percentEncoded: true).isEmpty, url.query(percentEncoded: true) == nil,
              url.fragment(percentEncoded: true) == nil
        else { throw invalid }
        do {
            try self.init(url: url)
        } catch {
            throw invalid
        }
    }

    /// The origin of an absolute `https` URL; user info must be absent.
    init(url: URL) throws(WebPushError) {
        guard url.scheme?.lowercased() == "https" else {
            throw WebPushError(.invalidOrigin, field: "origin", "the URL's scheme is not https")
        }
        guard url.user(percentEncoded: true) == nil, url.password(percentEncoded: true) == nil else {
            throw WebPushError(.invalidOrigin, field: "origin", "the URL has user info")
        }
        guard let rawHost = url.host(percentEncoded: true), !rawHost.isEmpty else {
            throw WebPushError(.invalidOrigin, field: "origin", "the URL has no host")
        }
        // Foundation gives IPv6 hosts without their brackets.
        let host = rawHost.contains(":") ? "[" + rawHost + "]" : rawHost
        try self.init(host: host, port: url.port ?? 443)
    }

    public var description: String { serialized }

    public static func < (lhs: WebPushOrigin, rhs: WebPushOrigin) -> Bool {
        lhs.serialized < rhs.serialized
    }

    /// The lowercased host, or `nil` unless it is an IPv6 literal in brackets or made only of letters, digits,
    /// `-`, `_` and `.` (so no percent-encoding, no Unicode: one host, one spelling).
    static func normalisedHost(_ host: String) -> String? {
        let bytes = Array(host.utf8)
        guard !bytes.isEmpty, bytes.count <= 255 else { return nil }
        if bytes.first == UInt8(ascii: "[") {
            guard bytes.last == UInt8(ascii: "]"), bytes.count > 2,
                  bytes.dropFirst().dropLast().allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") })
            else { return nil }
            return host.lowercased()
        }
        guard bytes.allSatisfy({ isHostByte($0) }),
              !host.split(separator: ".", omittingEmptySubsequences: false).contains(where: \.isEmpty)
        else { return nil }
        return host.lowercased()
    }

    private static func isHostByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
            return true
        default:
            return false
        }
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return false
        }
    }
}
