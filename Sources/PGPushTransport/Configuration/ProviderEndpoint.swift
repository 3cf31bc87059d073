import PGPushCore

/// Where the transport connects: a provider's HTTPS host (its well-known ones are under `Providers/`), or
/// any other (the simulator).
public struct ProviderEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// The host name or IP address to connect to.
    public var host: String
    /// The TCP port.
    public var port: Int

    /// - Parameters:
    ///   - host: A DNS name, or an IP literal (verified against the certificate's IP SAN, no SNI).
    ///   - port: 443 by default.
    public init(host: String, port: Int = 443) {
        self.host = host
        self.port = port
    }

    /// Any host, for example the simulator on 127.0.0.1.
    public static func custom(host: String, port: Int) -> ProviderEndpoint {
        ProviderEndpoint(host: host, port: port)
    }

    /// Parses a base URL such as `https://127.0.0.1:2197` or `https://localhost:8443`.
    ///
    /// Only `https` is accepted (the transport speaks HTTP/2 over TLS only); a missing port means 443.
    /// IPv6 literals go in brackets: `https://[::1]:8443`.
    public init(url: String) throws {
        var rest = Substring(url.trimmingWhitespace)
        guard rest.lowercased().hasPrefix("https://") else {
            throw PGPushError(.invalidConfiguration, "Provider endpoint must be an https:// URL", detail: url)
        }
        rest = rest.dropFirst("https://".count)
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[slash...]
            guard path == "/" else {
                throw PGPushError(.invalidConfiguration, "Provider endpoint must not have a path", detail: url)
            }
            rest = rest[..<slash]
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw PGPushError(.invalidConfiguration, "Provider endpoint has an unterminated IPv6 literal", detail: url)
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty {
                throw PGPushError(.invalidConfiguration, "Provider endpoint is malformed", detail: url)
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else {
            throw PGPushError(.invalidConfiguration, "Provider endpoint has no host", detail: url)
        }
        var port = 443
        if let portText {
            guard let parsed = Int(portText), (1...65_535).contains(parsed) else {
                throw PGPushError(.invalidConfiguration, "Provider endpoint has an invalid port", detail: url)
            }
            port = parsed
        }
        self.init(host: String(host), port: port)
    }

    /// Whether `host` is an IPv4 or IPv6 literal; TLS then verifies the certificate against the IP and sends no SNI.
    public var hostIsIPAddress: Bool {
        if host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
    }

    /// The `:authority` pseudo-header value.
    public var authority: String {
        let printedHost = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? printedHost : "\(printedHost):\(port)"
    }

    public var description: String { "https://\(authority)" }
}

extension String {
    fileprivate var trimmingWhitespace: String {
        var s = Substring(self)
        while let first = s.first, first.isWhitespace { s = s.dropFirst() }
        while let last = s.last, last.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
