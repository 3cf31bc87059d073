import Foundation
import Logging
import NIOCore
import NIOPosix
import PGPushCore

/// Exchanges a service account's signed assertion for an OAuth 2.0 access token at the account's
/// `token_uri`, over the same HTTP/2 machinery as the sends (Google's token endpoint speaks HTTP/2): one
/// connection, opened for the exchange and closed after it. An exchange happens about once an hour per
/// service account for a whole fleet, so a pooled HTTP client would buy nothing but a dependency.
public struct FCMTokenExchange: Sendable {
    /// Extra CA certificates trusted for the token endpoint (the simulator's CA); verification stays on.
    public var additionalTrustRootsPEMFile: String?
    /// Connecting and answering together may take this long.
    public var timeout: Duration
    public var eventLoopGroup: any EventLoopGroup
    /// The HTTP proxy the exchange tunnels through (the worker's `--https-proxy`), unless `NO_PROXY` names the
    /// token endpoint's host.
    public var proxy: HTTPProxyConfiguration?

    public init(additionalTrustRootsPEMFile: String? = nil, timeout: Duration = .seconds(10),
                eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
                proxy: HTTPProxyConfiguration? = nil) {
        self.additionalTrustRootsPEMFile = additionalTrustRootsPEMFile
        self.timeout = timeout
        self.eventLoopGroup = eventLoopGroup
        self.proxy = proxy
    }

    /// Why an exchange failed. `refused` is the endpoint's answer to this service account (a configuration
    /// error: a revoked key, a wrong account); `unreachable` may pass (a network failure, a 5xx).
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public enum Kind: Sendable, Hashable { case refused, unreachable }
        public var kind: Kind
        /// Readable, without the assertion or any token.
        public var reason: String
        public var description: String { reason }
    }

    /// Signs an assertion for `account` at `now` and exchanges it.
    public func exchange(for account: FCMServiceAccount, now: Date = Date(), logger: Logger) async throws -> FCMAccessToken {
        let assertion = try FCMAssertionSigner(account: account).sign(issuedAt: now)
        let uri = account.tokenURI
        guard let host = uri.host, !host.isEmpty else {
            throw Failure(kind: .refused, reason: "token_uri has no host")
        }
        var configuration = HTTP2ClientConfiguration(
            endpoint: ProviderEndpoint(host: host, port: uri.port ?? 443), provider: FCMRules(.oauth))
        configuration.additionalTrustRootsPEMFile = additionalTrustRootsPEMFile
        configuration.proxy = proxy
        configuration.connectionsPerPool = 1
        configuration.requestTimeout = timeout
        configuration.connectTimeout = timeout
        configuration.maximumResponseBodyBytes = 65_536
        configuration.reconnectBackoff = ReconnectBackoff(minimum: .milliseconds(200), maximum: .seconds(2))
        let pool = try HTTP2ConnectionPool(configuration: configuration, credentials: .none, eventLoopGroup: eventLoopGroup, logger: logger)
        let request = FormPostRequest(
            path: (uri.path.isEmpty ? "/" : uri.path) + (uri.query.map { "?" + $0 } ?? ""), form: assertion.tokenRequestBody)
        let outcome = await withDiscardingTaskGroup { running in
            running.addTask { try? await pool.run() }
            let outcome = await withTaskGroup(of: ProviderOutcome?.self) { group in
                group.addTask { await pool.send(request) }
                group.addTask {
                    // A connection that never comes up would leave the request waiting for a slot indefinitely.
                    try? await Task.sleep(for: timeout + .seconds(1))
                    return nil
                }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first
            }
            // The connection closes once the pool stops; the group waits for that, so no socket stays behind.
            running.cancelAll()
            return outcome
        }
        switch outcome {
        case .response(let response)?:
            if response.status == 200 {
                do {
                    return try FCMAccessToken.parse(response.body, receivedAt: Date())
                } catch {
                    throw Failure(kind: .refused, reason: "the token endpoint's answer is not an access token: \(error.message)")
                }
            }
            let refusal = FCMOAuthError.parse(status: response.status, body: response.body)
            let kind: Failure.Kind = (500..<600).contains(response.status) || response.status == 429 ? .unreachable : .refused
            throw Failure(kind: kind, reason: "the token endpoint answered \(response.status): \(refusal)")
        case .noResponse(let reason)?:
            if case .tlsRejected(let text) = reason {
                throw Failure(kind: .refused, reason: "the token endpoint's TLS was refused: \(text)")
            }
            throw Failure(kind: .unreachable, reason: "the token endpoint could not be reached (\(reason))")
        case nil:
            throw Failure(kind: .unreachable, reason: "the token endpoint did not answer within \(timeout)")
        }
    }
}
