/// The push-service origins workers may send to: the public push services, plus any an operator allows.
///
/// A subscription is posted to the website's backend by anyone, and its endpoint is just a URL the poster chose.
/// Sending to every endpoint would let anyone make the workers issue HTTPS requests into the operator's own
/// network (`https://10.0.0.5/admin`, `https://localhost:8080/`, a cloud metadata address) — server-side request
/// forgery. So an endpoint's origin must be on this list before anything is sent to it, and the check belongs
/// where a subscription is accepted as well as where a request is made.
///
/// The known public push services (origins as of 2025; they are all on port 443):
/// - Google (Chrome, and browsers built on it): `https://fcm.googleapis.com`
/// - Mozilla (Firefox): `https://updates.push.services.mozilla.com`
/// - Apple (Safari on macOS, web apps on iOS and iPadOS 16.4+): `https://web.push.apple.com`
/// - Microsoft WNS (Edge): `https://*.notify.windows.com`, any subdomain
///
/// Operator-allowed origins are written `https://host[:port]` (`https://127.0.0.1:8443` for a simulator) or
/// `https://*.example.com[:port]` for every subdomain of a domain; they are normalised as subscription origins
/// are (lowercase host, no `:443`). The check is by name: it does not look at what a name resolves to.
public struct WebPushOrigins: Sendable, CustomStringConvertible {
    /// One allowed origin, or every subdomain of a domain.
    public enum Pattern: Sendable, Hashable, CustomStringConvertible {
        /// Exactly this origin.
        case exact(WebPushOrigin)
        /// Any host ending in `.` + `domain` (not `domain` itself), on `port`.
        case subdomains(of: String, port: Int)

        public func matches(_ origin: WebPushOrigin) -> Bool {
            switch self {
            case .exact(let allowed):
                return allowed == origin
            case .subdomains(let domain, let port):
                return origin.port == port && origin.host.utf8.count > domain.utf8.count + 1
                    && origin.host.hasSuffix("." + domain)
            }
        }

        /// Parses `https://host[:port]` or `https://*.domain[:port]`.
        ///
        /// - Throws: ``WebPushError/Code/invalidOrigin``, quoting `text` (an operator's setting).
        public init(parsing text: String) throws(WebPushError) {
            let wildcardPrefix = "https://*."
            guard text.lowercased().hasPrefix(wildcardPrefix) else {
                self = .exact(try WebPushOrigin(parsing: text))
                return
            }
            let origin: WebPushOrigin
            do {
                origin = try WebPushOrigin(parsing: "https://" + text.dropFirst(wildcardPrefix.count))
            } catch {
                throw WebPushError(
                    .invalidOrigin, field: "origin",
                    "\"\(text)\" is not an origin pattern of the form https://*.domain[:port]"
                )
            }
            guard origin.host.contains("."), !origin.host.hasPrefix("[") else {
                throw WebPushError(
                    .invalidOrigin, field: "origin",
                    "\"\(text)\" allows too much: a wildcard needs a domain of at least two labels after *."
                )
            }
            self = .subdomains(of: origin.host, port: origin.port)
        }

        public var description: String {
            switch self {
            case .exact(let origin): return origin.serialized
            case .subdomains(let domain, let port): return "https://*." + domain + (port == 443 ? "" : ":\(port)")
            }
        }
    }

    /// The public push services' origins.
    public static let knownPushServices: [Pattern] = [
        "https://fcm.googleapis.com",
        "https://updates.push.services.mozilla.com",
        "https://web.push.apple.com",
        "https://*.notify.windows.com",
    ].map { try! Pattern(parsing: $0) }

    /// The public push services only.
    public static let publicPushServices = WebPushOrigins(patterns: knownPushServices)

    /// Every allowed pattern, the known push services first.
    public let patterns: [Pattern]
    private let exact: Set<WebPushOrigin>
    private let wildcards: [Pattern]

    /// - Parameters:
    ///   - operatorOrigins: Further origins, `https://host[:port]` or `https://*.domain[:port]`.
    ///   - includingKnownPushServices: `false` to allow only `operatorOrigins` (e.g. a test against a simulator).
    /// - Throws: ``WebPushError/Code/invalidOrigin`` for the first entry that is not an origin.
    public init(allowing operatorOrigins: [String] = [], includingKnownPushServices: Bool = true) throws(WebPushError) {
        var patterns = includingKnownPushServices ? Self.knownPushServices : []
        for text in operatorOrigins {
            let pattern = try Pattern(parsing: text)
            if !patterns.contains(pattern) { patterns.append(pattern) }
        }
        self.init(patterns: patterns)
    }

    public init(patterns: [Pattern]) {
        self.patterns = patterns
        var exact = Set<WebPushOrigin>()
        var wildcards: [Pattern] = []
        for pattern in patterns {
            if case .exact(let origin) = pattern { exact.insert(origin) } else { wildcards.append(pattern) }
        }
        self.exact = exact
        self.wildcards = wildcards
    }

    /// Whether requests may be sent to `origin`.
    public func allows(_ origin: WebPushOrigin) -> Bool {
        exact.contains(origin) || wildcards.contains { $0.matches(origin) }
    }

    /// Whether requests may be sent to `subscription`'s endpoint.
    public func allows(_ subscription: WebPushSubscription) -> Bool {
        allows(subscription.origin)
    }

    /// Whether `endpoint` is a valid endpoint (see ``WebPushSubscription``) on an allowed origin.
    public func allows(endpoint: String) -> Bool {
        guard let origin = try? WebPushSubscription.checkEndpoint(endpoint) else { return false }
        return allows(origin)
    }

    public var description: String { patterns.map(\.description).joined(separator: ", ") }
}
