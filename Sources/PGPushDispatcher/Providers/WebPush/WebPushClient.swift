import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PGPushCore
import PGPushTransport

/// How a worker reaches push services for Web Push.
struct WebPushClientConfiguration: Sendable {
    /// The origins a message may be sent to: the public push services and any the operator allows
    /// (`--web-push-allow-origin`). An endpoint comes from a browser, so it is untrusted: without this, anyone
    /// who can register a subscription could make workers send requests into the operator's own network.
    var allowedOrigins: WebPushOrigins = .publicPushServices
    /// Extra trust roots (`--web-push-ca-file`), for tests and simulators; the system's roots are always kept.
    var caFile: String?
    /// The most one request may take, connecting and reading the answer included.
    var requestTimeout: Duration = .seconds(10)
    /// Connections per push-service origin that offers HTTP/1.1 only (one request in flight on each).
    var http1ConnectionsPerOrigin = 32
    /// The most origins with an HTTP/2 pool of their own at once, and each pool's connections.
    var maximumHTTP2Origins = 16
    var http2ConnectionsPerOrigin = 4
    /// An origin's HTTP/2 pool nothing was sent through for this long is closed.
    var http2IdleTimeout: Duration = .seconds(300)
    /// The HTTP/2 implementation of the origins' pools.
    var http2Engine: HTTP2Engine = .default
}

/// One message to send and what to do with its answer, which comes exactly once.
struct WebPushDelivery: Sendable {
    var message: WebPushMessage
    var onAnswer: @Sendable (WebPushAnswer) -> Void
}

/// Sends Web Push messages, each to its endpoint's origin, over connections shared by every app (VAPID
/// authenticates each request, not the connection). TLS is always verified.
///
/// An origin is first reached through AsyncHTTPClient, whose ALPN offers `h2` and `http/1.1`; its answer says
/// which version the origin speaks, and ``WebPushOriginPools`` remembers it. An origin that speaks HTTP/2 then
/// gets the transport's ``HTTP2ConnectionPool``, where a batch of requests leaves in one write and a request
/// costs a fifth of AsyncHTTPClient's CPU; an HTTP/1.1-only origin keeps AsyncHTTPClient's keep-alive
/// connections.
///
/// The endpoint's origin is checked before anything else: a message to an origin that is not allowed opens no
/// connection. Logs name the origin only, never the endpoint's path or the subscription's keys.
final class WebPushClient: Sendable {
    /// The most of an answer's body that is read: enough for a push service's error, not for a hostile one.
    static let maximumAnswerBytes = 4 * 1024

    let configuration: WebPushClientConfiguration
    private let client: HTTPClient
    let origins: WebPushOriginPools
    private let tokens: VAPIDTokenCache
    private let logger: Logger

    init(configuration: WebPushClientConfiguration, tokens: VAPIDTokenCache, logger: Logger) throws(PGPushError) {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        if let caFile = configuration.caFile {
            do {
                tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(caFile))]
            } catch {
                throw PGPushError(.invalidConfiguration, "--web-push-ca-file \(caFile) could not be read as PEM certificates")
            }
        }
        let timeout = TimeAmount.milliseconds(configuration.requestTimeout.wholeMilliseconds)
        var httpConfiguration = HTTPClient.Configuration(
            tlsConfiguration: tls, redirectConfiguration: .disallow, timeout: .init(connect: timeout, read: timeout))
        httpConfiguration.httpVersion = .automatic
        // HTTP/1.1 carries one request at a time per connection: an origin without h2 gets this many, where
        // AsyncHTTPClient's default of 8 would hold a broadcast to 8 round trips at a time.
        httpConfiguration.connectionPool = .init(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: configuration.http1ConnectionsPerOrigin)
        self.client = HTTPClient(
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: httpConfiguration,
            backgroundActivityLogger: Self.quiet(logger))
        self.configuration = configuration
        self.tokens = tokens
        self.logger = Self.quiet(logger)
        self.origins = WebPushOriginPools(
            settings: .init(
                maximumPools: configuration.maximumHTTP2Origins, connectionsPerPool: configuration.http2ConnectionsPerOrigin,
                idleTimeout: configuration.http2IdleTimeout, caFile: configuration.caFile,
                requestTimeout: configuration.requestTimeout, http2Engine: configuration.http2Engine),
            logger: self.logger)
    }

    /// Encrypts `message` for its subscription, signs for its origin with `signer`, and POSTs it once.
    func send(_ message: WebPushMessage, signer: VAPIDSigner) async -> WebPushAnswer {
        await withCheckedContinuation { continuation in
            Task { await self.start([WebPushDelivery(message: message) { continuation.resume(returning: $0) }], signer: signer) }
        }
    }

    /// Sends every delivery as ``send(_:signer:)`` does one: the messages are encrypted together in one job on
    /// NIO's thread pool, and those to an HTTP/2 origin with a pool are started there together (one hop to
    /// each connection and one write); the rest go through AsyncHTTPClient concurrently. Returns when every
    /// request is written or answered; each `onAnswer` runs once, on an event loop or this task.
    func start(_ deliveries: [WebPushDelivery], signer: VAPIDSigner) async {
        var allowed: [WebPushDelivery] = []
        allowed.reserveCapacity(deliveries.count)
        for delivery in deliveries {
            if configuration.allowedOrigins.allows(delivery.message.subscription.origin) {
                allowed.append(delivery)
            } else {
                delivery.onAnswer(.endpointNotAllowed)
            }
        }
        guard !allowed.isEmpty else { return }
        let prepared = await prepare(allowed.map(\.message), signer: signer)
        // A batch reaches a handful of origins: a list searched in place beats a dictionary.
        var viaPools: [(pool: HTTP2ConnectionPool, submissions: [PushSubmission])] = []
        var viaClient: [(delivery: WebPushDelivery, body: [UInt8], token: VAPIDToken)] = []
        for (delivery, made) in zip(allowed, prepared) {
            let (body, token): ([UInt8], VAPIDToken)
            switch made {
            case .success(let result): (body, token) = result
            case .failure(let error):
                // WebPushError only (typed throws), whose message carries no key material.
                delivery.onAnswer(.unsendable(error.message))
                continue
            }
            let origin = delivery.message.subscription.origin
            guard case .http2(let pool) = origins.route(to: origin) else {
                viaClient.append((delivery, body, token))
                continue
            }
            let submission = PushSubmission(request: WebPushWireRequest(delivery.message, body: body, token: token)) { outcome in
                if Self.noConnection(outcome), pool.statistics.connectionsReady == 0 { self.origins.forget(origin, pool: pool) }
                delivery.onAnswer(Self.answer(of: outcome))
            }
            if let index = viaPools.firstIndex(where: { $0.pool === pool }) {
                viaPools[index].submissions.append(submission)
            } else {
                viaPools.append((pool, [submission]))
            }
        }
        await withDiscardingTaskGroup { group in
            for (delivery, body, token) in viaClient {
                group.addTask { delivery.onAnswer(await self.post(delivery.message, body: body, token: token)) }
            }
            for (pool, submissions) in viaPools { await pool.start(submissions) }
        }
    }

    /// One request through AsyncHTTPClient; its answer tells which HTTP version the origin speaks.
    private func post(_ message: WebPushMessage, body: [UInt8], token: VAPIDToken) async -> WebPushAnswer {
        var request = HTTPClientRequest(url: message.subscription.endpoint)
        request.method = .POST
        for (name, value) in message.headers(authorization: token) { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(
                request, deadline: .now() + .milliseconds(configuration.requestTimeout.wholeMilliseconds), logger: logger)
            origins.learned(message.subscription.origin, http2: response.version.major == 2)
            var answer: [UInt8] = []
            for try await part in response.body {
                answer += part.readableBytesView.prefix(Self.maximumAnswerBytes - answer.count)
                if answer.count >= Self.maximumAnswerBytes { break }
            }
            let status = Int(response.status.code)
            return .answered(
                status: status, reason: (200..<300).contains(status) ? nil : Self.reason(in: answer),
                retryAfter: Self.retryAfter(response.headers.first(name: "retry-after"), now: Date()))
        } catch {
            return .noAnswer(WebhookSender.describe(error, timeout: configuration.requestTimeout, caFlag: "--web-push-ca-file"))
        }
    }

    /// A pool's outcome as AsyncHTTPClient's answers are told.
    static func answer(of outcome: ProviderOutcome) -> WebPushAnswer {
        switch outcome {
        case .response(let response):
            return .answered(
                status: response.status, reason: response.reason,
                retryAfter: response.retryAfter.flatMap { Int($0) }.map { .seconds($0) })
        case .noResponse(let reason):
            // The transport's reasons name hosts and errors, never a request's path.
            return .noAnswer("\(reason)")
        }
    }

    /// Whether the request was never written because no connection could be had.
    private static func noConnection(_ outcome: ProviderOutcome) -> Bool {
        switch outcome {
        case .noResponse(.connectFailed), .noResponse(.tlsRejected): true
        default: false
        }
    }

    /// The client's logger at warning at least: AsyncHTTPClient's debug lines carry request URLs, and an
    /// endpoint's path is the subscription's secret name.
    private static func quiet(_ logger: Logger) -> Logger {
        var logger = logger
        logger.logLevel = max(logger.logLevel, .warning)
        return logger
    }

    /// The encrypted bodies and the VAPID tokens, made on NIO's thread pool in one job: encryption is most of a
    /// message's CPU, and on the connection's event loop it would hold every message of the worker to one core.
    private func prepare(
        _ messages: [WebPushMessage], signer: VAPIDSigner
    ) async -> [Result<([UInt8], VAPIDToken), WebPushError>] {
        let tokens = self.tokens
        let work: @Sendable () -> [Result<([UInt8], VAPIDToken), WebPushError>] = {
            messages.map { message in
                do throws(WebPushError) {
                    return .success((try WebPushEncryption.encrypt(message.plaintext, for: message.subscription),
                                     try tokens.token(for: message.subscription.origin, signer: signer)))
                } catch {
                    return .failure(error)
                }
            }
        }
        do {
            return try await NIOThreadPool.singleton.runIfActive(work)
        } catch {
            // The pool is stopping (the process is): make them here.
            return work()
        }
    }

    /// Closes every connection: the origins' HTTP/2 pools and AsyncHTTPClient's.
    func shutdown() async {
        await origins.shutdown()
        try? await client.shutdown()
    }
}
