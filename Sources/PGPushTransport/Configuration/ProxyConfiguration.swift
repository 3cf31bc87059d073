import Foundation
import PGPushCore

/// An HTTP proxy that provider connections are tunnelled through with `CONNECT` (`pgpush worker --https-proxy`,
/// `HTTPS_PROXY`). The proxy sees the target's host and port only: TLS, with the provider's SNI and full
/// certificate verification, runs inside the tunnel, end to end.
///
/// Only `http://` proxies are supported (the hop to the proxy is plain TCP); `https://` proxies (TLS to the proxy
/// itself) are refused with a message that says so. Credentials in the URL (`http://user:password@proxy:3128`,
/// percent-decoded) are sent as `Proxy-Authorization: Basic …` and never appear in logs or errors: those name
/// the proxy as ``redactedURL``.
public struct HTTPProxyConfiguration: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The proxy's host name or IP address.
    public var host: String
    /// The proxy's TCP port; 80 when the URL names none.
    public var port: Int
    /// The percent-decoded user name, if the URL has one.
    public var username: String?
    /// The percent-decoded password, if the URL has one.
    public var password: String?
    /// Hosts reached directly, not through the proxy (`NO_PROXY`).
    public var bypass: ProxyBypassList
    /// Whether tunnels through the proxy open, shared by every copy of this configuration (every pool of a
    /// worker): it logs refusals once every few seconds and answers `/readyz`.
    public let status: HTTPProxyStatus

    /// Parses `url`, which must be `http://[user[:password]@]host[:port][/]`.
    ///
    /// - Throws: ``PGPushError`` (`invalidConfiguration`) naming what is wrong; its text quotes the URL with
    ///   any credentials replaced by `***`.
    public init(url: String, bypass: ProxyBypassList = ProxyBypassList(), status: HTTPProxyStatus = HTTPProxyStatus()) throws(PGPushError) {
        let text = url.trimmingCharacters(in: .whitespaces)
        let shown = Self.redact(text)
        func refuse(_ problem: String) -> PGPushError {
            PGPushError(.invalidConfiguration, "proxy URL \(shown) \(problem)")
        }
        guard let schemeEnd = text.range(of: "://") else {
            throw refuse("must be an http:// URL, e.g. http://proxy.internal:3128")
        }
        let scheme = text[..<schemeEnd.lowerBound].lowercased()
        switch scheme {
        case "http":
            break
        case "https":
            throw refuse("uses https://, which is not supported: pgpush speaks plain HTTP to the proxy and tunnels TLS to the provider through it (the provider connection stays encrypted end to end); use http://")
        default:
            throw refuse("has the scheme \(scheme)://; only http:// proxies are supported")
        }
        var rest = text[schemeEnd.upperBound...]
        if let slash = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            guard rest[slash...] == "/" else { throw refuse("must not have a path, query or fragment") }
            rest = rest[..<slash]
        }
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userinfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let parts = userinfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let user = parts[0].removingPercentEncoding,
                  let pass = parts.count > 1 ? parts[1].removingPercentEncoding : "" else {
                throw refuse("has credentials that are not valid percent-encoding")
            }
            guard !user.isEmpty else { throw refuse("has a password but no user name") }
            username = user
            password = parts.count > 1 ? pass : nil
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw refuse("has an unterminated IPv6 literal") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { throw refuse("is malformed") }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw refuse("has no host") }
        guard host.allSatisfy({ !$0.isWhitespace && $0 != "/" && $0 != "@" }) else { throw refuse("has an invalid host") }
        var port = 80
        if let portText {
            guard let parsed = Int(portText), (1...65_535).contains(parsed) else { throw refuse("has an invalid port") }
            port = parsed
        }
        self.host = String(host)
        self.port = port
        self.username = username
        self.password = password
        self.bypass = bypass
        self.status = status
    }

    /// The proxy a worker uses: `flag` (`--https-proxy`) if given, else `HTTPS_PROXY`, else `https_proxy`; hosts
    /// in `NO_PROXY` (else `no_proxy`) are reached directly. `nil` when none is set (an empty value is unset).
    ///
    /// - Throws: ``PGPushError`` naming the flag or variable the bad URL came from, credentials redacted.
    public static func resolve(flag: String?, environment: [String: String]) throws(PGPushError) -> HTTPProxyConfiguration? {
        func value(_ name: String) -> String? {
            guard let value = environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
            return value
        }
        let source: (name: String, url: String)?
        if let flag = flag?.trimmingCharacters(in: .whitespaces), !flag.isEmpty {
            source = ("--https-proxy", flag)
        } else if let url = value("HTTPS_PROXY") {
            source = ("HTTPS_PROXY", url)
        } else if let url = value("https_proxy") {
            source = ("https_proxy", url)
        } else {
            source = nil
        }
        guard let source else { return nil }
        let bypass = ProxyBypassList(value("NO_PROXY") ?? value("no_proxy") ?? "")
        do {
            return try HTTPProxyConfiguration(url: source.url, bypass: bypass)
        } catch {
            throw PGPushError(.invalidConfiguration, "\(source.name): \(error.message)")
        }
    }

    /// `http://host:port`, or `http://***@host:port` when the URL has credentials: how logs and errors name the
    /// proxy.
    public var redactedURL: String {
        let printedHost = host.contains(":") ? "[\(host)]" : host
        return "http://\(username == nil ? "" : "***@")\(printedHost):\(port)"
    }

    public var description: String { redactedURL }

    public var debugDescription: String { "HTTPProxyConfiguration(\(redactedURL), no_proxy: \(bypass))" }

    /// `dump` and `String(reflecting:)` of a configuration that holds this one show no password either.
    public var customMirror: Mirror {
        Mirror(self, children: ["url": redactedURL, "bypass": bypass], displayStyle: .struct)
    }

    /// The `Proxy-Authorization` header's value, `Basic base64(user:password)`, when the URL has credentials.
    public var proxyAuthorization: String? {
        guard let username else { return nil }
        return "Basic " + Data("\(username):\(password ?? "")".utf8).base64EncodedString()
    }

    /// Whether a connection to `host` goes through the proxy (it is not in ``bypass``).
    public func tunnels(to host: String) -> Bool {
        !bypass.matches(host)
    }

    /// `text` with whatever stands between `://` and the last `@` of the authority replaced by `***`, so a URL
    /// that did not parse can still be quoted.
    static func redact(_ text: String) -> String {
        guard let schemeEnd = text.range(of: "://") else {
            // No scheme: `user:password@host:port` would still carry a secret before an `@`.
            guard let at = text.lastIndex(of: "@") else { return text }
            return "***" + text[at...]
        }
        let rest = text[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return text }
        return text[..<schemeEnd.upperBound] + "***" + text[at...]
    }
}

/// The hosts reached without the proxy, from `NO_PROXY`: comma-separated entries, each a host name or IP
/// address (`api.example.com` also covers its subdomains), a domain suffix with a leading dot (`.internal`,
/// `*.internal`: that domain and every host under it), or `*` (everything). Ports in entries are ignored, case
/// does not matter. Nothing is excluded implicitly: `localhost` and `127.0.0.1` go through the proxy unless
/// listed.
public struct ProxyBypassList: Sendable, Hashable, CustomStringConvertible {
    /// The entries as understood: lowercased, without ports, brackets or a leading `*`/`.`.
    public private(set) var names: [String] = []
    /// `*` was listed.
    public private(set) var matchesEverything = false

    public init(_ list: String = "") {
        for raw in list.split(separator: ",") {
            var entry = raw.trimmingCharacters(in: .whitespaces).lowercased()[...]
            if entry.isEmpty { continue }
            if entry == "*" {
                matchesEverything = true
                continue
            }
            if entry.hasPrefix("[") {
                // `[::1]` or `[::1]:443`.
                guard let close = entry.firstIndex(of: "]") else { continue }
                entry = entry[entry.index(after: entry.startIndex)..<close]
            } else if entry.filter({ $0 == ":" }).count == 1, let colon = entry.firstIndex(of: ":") {
                // `host:port`; an IPv6 literal without brackets has more than one colon and keeps them.
                entry = entry[..<colon]
            }
            while entry.hasPrefix("*") || entry.hasPrefix(".") { entry = entry.dropFirst() }
            while entry.hasSuffix(".") { entry = entry.dropLast() }
            if !entry.isEmpty { names.append(String(entry)) }
        }
    }

    public var isEmpty: Bool { names.isEmpty && !matchesEverything }

    /// Whether `host` is reached directly: `*` was listed, or `host` is an entry or under one.
    public func matches(_ host: String) -> Bool {
        if matchesEverything { return true }
        var host = host.lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        while host.hasSuffix(".") { host.removeLast() }
        return names.contains { name in host == name || host.hasSuffix("." + name) }
    }

    public var description: String {
        let all = (matchesEverything ? ["*"] : []) + names
        return all.isEmpty ? "-" : all.joined(separator: ",")
    }
}
