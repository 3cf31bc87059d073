import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PGPushCore

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
}

/// Sends Web Push messages through AsyncHTTPClient: HTTP/2 where a push service's ALPN offers `h2`, HTTP/1.1
/// keep-alive where it does not, with connections pooled per origin and shared by every app (VAPID
/// authenticates each request, not the connection). TLS is always verified.
///
/// The endpoint's origin is checked before anything else: a message to an origin that is not allowed opens no
/// connection. Logs name the origin only, never the endpoint's path or the subscription's keys.
final class WebPushClient: Sendable {
    /// The most of an answer's body that is read: enough for a push service's error, not for a hostile one.
    static let maximumAnswerBytes = 4 * 1024

    let configuration: WebPushClientConfiguration
    private let client: HTTPClient
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
    }

    /// Encrypts `message` for its subscription, signs for its origin with `signer`, and POSTs it once.
    func send(_ message: WebPushMessage, signer: VAPIDSigner) async -> WebPushAnswer {
        let origin = message.subscription.origin
        guard configuration.allowedOrigins.allows(origin) else { return .endpointNotAllowed }
        let body: [UInt8]
        let token: VAPIDToken
        switch await prepare(message, origin: origin, signer: signer) {
        case .success(let prepared):
            (body, token) = prepared
        case .failure(let error):
            // WebPushError only (typed throws), whose message carries no key material.
            return .unsendable(error.message)
        }
        var request = HTTPClientRequest(url: message.subscription.endpoint)
        request.method = .POST
        for (name, value) in message.headers(authorization: token) { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(
                request, deadline: .now() + .milliseconds(configuration.requestTimeout.wholeMilliseconds), logger: logger)
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

    /// The client's logger at warning at least: AsyncHTTPClient's debug lines carry request URLs, and an
    /// endpoint's path is the subscription's secret name.
    private static func quiet(_ logger: Logger) -> Logger {
        var logger = logger
        logger.logLevel = max(logger.logLevel, .warning)
        return logger
    }

    /// The encrypted body and the VAPID token, made on NIO's thread pool: encryption is most of a message's CPU,
    /// and on the connection's event loop it would hold every message of the worker to one core.
    private func prepare(
        _ message: WebPushMessage, origin: WebPushOrigin, signer: VAPIDSigner
    ) async -> Result<([UInt8], VAPIDToken), WebPushError> {
        let tokens = self.tokens
        let work: @Sendable () -> Result<([UInt8], VAPIDToken), WebPushError> = {
            do throws(WebPushError) {
                return .success((try WebPushEncryption.encrypt(message.plaintext, for: message.subscription),
                                 try tokens.token(for: origin, signer: signer)))
            } catch {
                return .failure(error)
            }
        }
        do {
            return try await NIOThreadPool.singleton.runIfActive(work)
        } catch {
            // The pool is stopping (the process is): make it here.
            return work()
        }
    }

    func shutdown() async {
        try? await client.shutdown()
    }

    /// What an error answer's body says, in a few words: a JSON object's `reason` (Apple), `error.message` or
    /// `message` (others), else a short line of text. Nil for anything else.
    static func reason(in body: [UInt8]) -> String? {
        guard !body.isEmpty else { return nil }
        if let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] {
            let found = object["reason"] as? String ?? (object["error"] as? [String: Any])?["message"] as? String
                ?? object["message"] as? String ?? object["error"] as? String
            return found.map(short)
        }
        guard let text = String(validating: body, as: UTF8.self) else { return nil }
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        let printable = line.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7F }
        return printable && !line.isEmpty ? short(line) : nil
    }

    /// `Retry-After` as seconds or an HTTP date (RFC 9110 §10.2.3); nil when absent or unreadable, never
    /// negative, at most an hour.
    static func retryAfter(_ value: String?, now: Date) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value), seconds >= 0 { return .seconds(min(seconds, 3600)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .seconds(Int(min(max(date.timeIntervalSince(now), 0), 3600).rounded(.up)))
    }

    private static func short(_ text: String) -> String {
        text.count <= 200 ? text : String(text.prefix(200)) + "…"
    }
}
