import struct Foundation.URL

/// The `sub` claim of a VAPID token (RFC 8292 §2.1): a `mailto:` address or an `https:` URL of whoever operates
/// the sender, so a push service can reach them.
///
/// RFC 8292 only asks for a contact URI; Apple's push service is stricter and answers 403 `BadJwtToken` to a
/// subject it does not like, which looks like a key problem and is hard to diagnose from the sender. So a
/// subject is checked when it is configured, against Apple's rule:
/// - it starts with `mailto:` or `https:` (lowercase);
/// - no whitespace anywhere (`mailto: ops@example.com` fails), no angle brackets (`mailto:<ops@example.com>`
///   fails), printable ASCII only (write an internationalised domain in its `xn--` form);
/// - `mailto:` has exactly one `@` with a non-empty local part before it;
/// - the host (the domain of the address, or the URL's host) is a real public domain: not `localhost`, not under
///   `.local`, not an IP address, with at least one dot and a top-level domain made of letters.
public struct VAPIDSubject: Sendable, Hashable, CustomStringConvertible {
    /// The subject exactly as configured and as it goes into the token.
    public let value: String

    /// - Throws: ``WebPushError`` with ``WebPushError/Code/invalidVAPIDSubject`` and field `subject`; the message
    ///   says which rule the subject breaks.
    public init(_ value: String) throws(WebPushError) {
        try Self.check(value)
        self.value = value
    }

    public var description: String { value }

    private static func refuse(_ reason: String) -> WebPushError {
        WebPushError(
            .invalidVAPIDSubject, field: "subject",
            "Apple's push service refuses a VAPID subject \(reason) (403 BadJwtToken)"
        )
    }

    private static func check(_ value: String) throws(WebPushError) {
        guard !value.isEmpty else {
            throw WebPushError(
                .invalidVAPIDSubject, field: "subject",
                "the VAPID subject is empty; use a mailto: address or an https: URL of whoever operates the sender"
            )
        }
        if value.unicodeScalars.contains(where: { $0.properties.isWhitespace }) {
            throw refuse("with whitespace in it; write it as mailto:ops@example.com")
        }
        if value.contains("<") || value.contains(">") {
            throw refuse("with angle brackets; write it as mailto:ops@example.com")
        }
        guard value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw refuse("with control or non-ASCII characters; write an internationalised domain in its xn-- form")
        }
        if value.hasPrefix("mailto:") {
            let address = value.dropFirst("mailto:".count)
            let parts = address.split(separator: "@", omittingEmptySubsequences: false)
            guard parts.count == 2 else {
                throw refuse("whose mailto: address does not have exactly one @")
            }
            guard !parts[0].isEmpty else {
                throw refuse("whose mailto: address has nothing before the @")
            }
            try checkHost(String(parts[1]), what: "mailto: address's domain")
        } else if value.hasPrefix("https:") {
            guard value.hasPrefix("https://"), let url = URL(string: value),
                  let host = url.host(percentEncoded: true), !host.isEmpty
            else {
                throw refuse("that is not an https://host/… URL")
            }
            let isIPv6 = value.dropFirst("https://".count).hasPrefix("[")
            try checkHost(isIPv6 ? "[" + host + "]" : host, what: "URL's host")
        } else {
            throw refuse("that does not start with mailto: or https:")
        }
    }

    /// A real public domain name, refused with the most specific reason.
    private static func checkHost(_ host: String, what: String) throws(WebPushError) {
        let host = host.lowercased()
        guard !host.isEmpty else { throw refuse("whose \(what) is empty") }
        if host.hasPrefix("[") || host.contains(":") {
            throw refuse("on an IP address; use a domain name")
        }
        if host == "localhost" || host.hasSuffix(".localhost") {
            throw refuse("on localhost")
        }
        if host == "local" || host.hasSuffix(".local") {
            throw refuse("on a .local host")
        }
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if labels.count == 4, labels.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { (0x30...0x39).contains($0) } }) {
            throw refuse("on an IP address; use a domain name")
        }
        let isLDH: (Substring) -> Bool = { label in
            !label.isEmpty && label.count <= 63 && label.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || byte == UInt8(ascii: "-")
            }
        }
        guard labels.allSatisfy(isLDH) else {
            throw refuse("whose \(what) is not a host name (letters, digits, '-' and dots)")
        }
        guard labels.count >= 2 else {
            throw refuse("whose \(what) \"\(host)\" is not a real domain (it has no dot)")
        }
        let topLevel = labels[labels.count - 1]
        guard topLevel.count >= 2, topLevel.utf8.allSatisfy({ (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) }) else {
            throw refuse("whose \(what) \"\(host)\" is not a real domain (its top-level domain is not letters)")
        }
    }
}
