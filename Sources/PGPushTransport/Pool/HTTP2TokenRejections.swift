import PGPushCore

/// A token a provider rejected, to be reported to the source it came from.
struct HTTP2TokenRejection: Sendable {
    var source: any ProviderTokenSource
    var token: ProviderToken
    var reason: String
}
