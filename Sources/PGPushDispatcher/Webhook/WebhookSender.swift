import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PGPushCore

/// The relay's HTTP client: one POST per attempt, through AsyncHTTPClient.
///
/// A well-kept client rather than a hand-written one: TLS with the system's roots (plus `--ca-file`) and
/// hostname verification, HTTP/1.1 or HTTP/2 as ALPN decides, keep-alive connections reused from one event to
/// the next, and a deadline on each request that covers connecting, sending and reading the whole answer.
/// Redirects are not followed: a 3xx is an answer that is not 2xx, and the event is tried again.
final class WebhookSender: Sendable {
    /// What one attempt came to.
    enum Outcome: Sendable, Hashable {
        /// A 2xx: the event is delivered.
        case delivered(status: Int)
        /// Any other answer.
        case refused(status: Int)
        /// No answer: a timeout, a refused or broken connection, a TLS failure.
        case failed(String)

        /// What a log line says about a failed attempt; equal strings are "the same failure".
        var problem: String? {
            switch self {
            case .delivered: return nil
            case .refused(let status): return "HTTP \(status)"
            case .failed(let reason): return reason
            }
        }
    }

    /// The most of an answer's body that is read (and thrown away); the rest ends the connection.
    static let maximumAnswerBytes = 64 * 1024

    private let client: HTTPClient
    private let url: URL
    private let timeout: Duration
    private let logger: Logger

    init(configuration: WebhookConfiguration, logger: Logger) throws(PGPushError) {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        if let caFile = configuration.caFile {
            do {
                tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(caFile))]
            } catch {
                throw PGPushError(.invalidConfiguration, "--ca-file \(caFile) could not be read as PEM certificates")
            }
        }
        let timeout = TimeAmount.milliseconds(configuration.requestTimeout.wholeMilliseconds)
        var httpConfiguration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: .init(connect: timeout, read: timeout))
        httpConfiguration.connectionPool = .init(idleTimeout: .seconds(60))
        self.client = HTTPClient(
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: httpConfiguration,
            backgroundActivityLogger: logger)
        self.url = configuration.url
        self.timeout = configuration.requestTimeout
        self.logger = logger
    }

    /// POSTs `message` once.
    func send(_ message: WebhookMessage) async -> Outcome {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        for (name, value) in message.headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: message.body))
        do {
            let response = try await client.execute(
                request, deadline: .now() + .milliseconds(timeout.wholeMilliseconds), logger: logger)
            // Read the answer through, so that the connection can carry the next event.
            var read = 0
            for try await part in response.body {
                read += part.readableBytes
                if read > Self.maximumAnswerBytes { break }
            }
            let status = Int(response.status.code)
            return (200..<300).contains(status) ? .delivered(status: status) : .refused(status: status)
        } catch {
            return .failed(Self.describe(error, timeout: timeout))
        }
    }

    func shutdown() async {
        try? await client.shutdown()
    }

    /// A failed attempt in a few words, without the URL (which may carry a credential). `caFlag` is the option
    /// that adds a trust root for this client.
    static func describe(_ error: any Error, timeout: Duration, caFlag: String = "--ca-file") -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout:
                return "no answer within \(formatted(timeout))"
            case .connectTimeout:
                return "connecting timed out"
            case .tlsHandshakeTimeout:
                return "the TLS handshake timed out"
            case .remoteConnectionClosed:
                return "the receiver closed the connection"
            default:
                return "\(error)"
            }
        }
        if let error = error as? NIOConnectionError {
            if error.dnsAError != nil || error.dnsAAAAError != nil { return "the host name could not be resolved" }
            if let first = error.connectionErrors.first { return describe(first.error, timeout: timeout, caFlag: caFlag) }
            return "the host name has no address"
        }
        if let error = error as? IOError {
            switch error.errnoCode {
            case ECONNREFUSED: return "connection refused"
            case ECONNRESET: return "connection reset"
            case ETIMEDOUT: return "connecting timed out"
            case EHOSTUNREACH, ENETUNREACH: return "no route to host"
            default: return "I/O error: \(error.description)"
            }
        }
        if let error = error as? ChannelError, case .connectTimeout = error { return "connecting timed out" }
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "TLS refused: the receiver's certificate does not name its host"
        }
        if error is NIOSSLError || error is NIOSSLExtraError || error is BoringSSLError {
            if "\(error)".contains("CERTIFICATE_VERIFY_FAILED") {
                return "TLS refused: the receiver's certificate is not trusted (an extra CA goes in \(caFlag))"
            }
            return "TLS failed: \(error)"
        }
        return "\(error)"
    }

    private static func formatted(_ duration: Duration) -> String {
        let seconds = duration.inSeconds
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }
}

extension Duration {
    /// Whole milliseconds, for NIO's `TimeAmount` and AsyncHTTPClient's deadlines (the webhook relay's and the
    /// Web Push client's).
    var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
