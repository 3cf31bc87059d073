import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import PGPushCore
import PGPushSimulator
import Testing

/// A started Web Push simulator, an AsyncHTTPClient that trusts its CA (HTTP/2 by ALPN, or HTTP/1.1 only),
/// and helpers that encrypt and sign pushes as a sender does.
struct WebPushSimulatorHarness: Sendable {
    static let subject = "mailto:ops@example.com"

    let simulator: WebPushSimulator
    let client: HTTPClient
    /// The sender's VAPID key.
    let key: VAPIDKey
    let signer: VAPIDSigner

    /// What one push got back.
    struct Outcome: Sendable {
        var status: Int
        var version: HTTPVersion
        var headers: [String: String]
        var body: String

        /// The `reason` of a JSON error body.
        var reason: String? {
            ((try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any])?["reason"] as? String
        }
    }

    /// Starts a simulator and a client, runs `body`, and always shuts both down.
    static func with<T: Sendable>(
        http1OnlyClient: Bool = false,
        configure: (inout WebPushSimulatorConfiguration) -> Void = { _ in },
        _ body: (WebPushSimulatorHarness) async throws -> T
    ) async throws -> T {
        var configuration = WebPushSimulatorConfiguration()
        let certificateDirectory = NSTemporaryDirectory() + "pgpush-webpush-simulator-test-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: certificateDirectory) }
        configuration.certificateDirectory = certificateDirectory
        configuration.threadCount = 1
        configuration.ledgerKeepsPayloads = true
        configure(&configuration)
        let simulator = WebPushSimulator(configuration: configuration, logger: Logger(label: "webpush-simulator-test"))
        try await simulator.start()
        let client: HTTPClient
        do {
            client = try makeClient(caPath: simulator.caCertificatePath, http1Only: http1OnlyClient)
        } catch {
            await simulator.shutdown()
            throw error
        }
        let key = VAPIDKey.generate()
        let harness = WebPushSimulatorHarness(
            simulator: simulator, client: client, key: key, signer: VAPIDSigner(key: key, subject: try VAPIDSubject(subject)))
        do {
            let result = try await body(harness)
            try? await client.shutdown()
            await simulator.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            await simulator.shutdown()
            throw error
        }
    }

    static func makeClient(caPath: String, http1Only: Bool) throws -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caPath))
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = http1Only ? .http1Only : .automatic
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// The origin of the simulator's endpoints.
    var origin: WebPushOrigin { simulator.origin! }

    /// One subscription the simulator made.
    func subscribe(applicationServerKey: String? = nil,
                   outcome: WebPushSimulatorRegistry.Outcome = .live) throws -> WebPushSimulatorSubscription {
        try #require(try simulator.makeSubscriptions(count: 1, applicationServerKey: applicationServerKey, outcome: outcome).first)
    }

    /// A `vapid t=…, k=…` header for the simulator's origin.
    func authorization(audience: WebPushOrigin? = nil, lifetime: TimeInterval = 3600) throws -> String {
        try signer.sign(audience: audience ?? origin, now: Date(), lifetime: lifetime).authorization
    }

    /// A VAPID header with any `sub` (or none), signed by `key`: what VAPIDSigner refuses to make.
    static func handMadeAuthorization(key: P256.Signing.PrivateKey, audience: String, subject: String?,
                                      expiresIn: TimeInterval = 3600) throws -> String {
        let header = WebPushBase64URL.encode(Array(#"{"typ":"JWT","alg":"ES256"}"#.utf8))
        var claims: [String: Any] = ["aud": audience, "exp": Int(Date().timeIntervalSince1970 + expiresIn)]
        if let subject { claims["sub"] = subject }
        let claimsJSON = try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys, .withoutEscapingSlashes])
        let input = header + "." + WebPushBase64URL.encode(claimsJSON)
        let signature = try key.signature(for: Data(input.utf8))
        let jwt = input + "." + WebPushBase64URL.encode(signature.rawRepresentation)
        return "vapid t=\(jwt), k=\(WebPushBase64URL.encode(key.publicKey.x963Representation))"
    }

    /// POSTs to `endpoint` with the given headers and body.
    func post(_ endpoint: String, headers: [(String, String)], body: [UInt8] = []) async throws -> Outcome {
        var request = HTTPClientRequest(url: endpoint)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if !body.isEmpty { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await client.execute(request, timeout: .seconds(10))
        let buffer = try await response.body.collect(upTo: 1 << 20)
        var fields: [String: String] = [:]
        for (name, value) in response.headers { fields[name.lowercased()] = value }
        return Outcome(status: Int(response.status.code), version: response.version, headers: fields,
                       body: String(buffer: buffer))
    }

    /// Encrypts `plaintext` for `subscription` and pushes it, signed with the harness's key.
    func push(_ plaintext: String, to subscription: WebPushSimulatorSubscription, ttl: String? = "60",
              extraHeaders: [(String, String)] = [], authorization: String? = nil) async throws -> Outcome {
        let body = try WebPushEncryption.encrypt(Array(plaintext.utf8), for: subscription.subscription)
        var headers: [(String, String)] = [("Content-Encoding", "aes128gcm"), ("Authorization", try authorization ?? self.authorization())]
        if let ttl { headers.append(("TTL", ttl)) }
        return try await post(subscription.endpoint, headers: headers + extraHeaders, body: body)
    }
}
