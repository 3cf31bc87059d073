import PGPushCore

/// Apple's endpoints. APNs listens on 443 and 2197.
extension ProviderEndpoint {
    /// `api.push.apple.com` on port 443.
    public static let production = ProviderEndpoint(host: APNsEnvironment.production.host)
    /// `api.sandbox.push.apple.com` on port 443.
    public static let sandbox = ProviderEndpoint(host: APNsEnvironment.sandbox.host)

    /// Apple's service for `environment`, on `port` (443 or 2197).
    public static func apple(_ environment: APNsEnvironment, port: Int = 443) -> ProviderEndpoint {
        ProviderEndpoint(host: environment.host, port: port)
    }

    /// Apple's channel management service for `environment`: Live Activity broadcast channels are made, read
    /// and deleted there, on port 2195 (sandbox) or 2196 (production), not 443.
    public static func appleChannelManagement(_ environment: APNsEnvironment) -> ProviderEndpoint {
        switch environment {
        case .sandbox: ProviderEndpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
        case .production: ProviderEndpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
        }
    }
}

extension HTTP2ClientConfiguration {
    /// Defaults throughout, connecting to APNs production with ``APNsRules``.
    public init() {
        self.init(endpoint: .production, provider: APNsRules())
    }

    /// Defaults throughout, connecting to `endpoint` with ``APNsRules`` (the simulator, a stand-in).
    public init(endpoint: ProviderEndpoint) {
        self.init(endpoint: endpoint, provider: APNsRules())
    }
}
