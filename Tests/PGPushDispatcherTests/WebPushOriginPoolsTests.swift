import Foundation
import Logging
import PGPushCore
@testable import PGPushDispatcher
import PGPushSimulator
import PGPushTestSupport
import PGPushTransport
import Testing

/// Which way a Web Push message goes: an origin's first answer (through AsyncHTTPClient) tells its HTTP version;
/// an HTTP/2 origin then gets a pool of the transport's own, an HTTP/1.1-only one stays with AsyncHTTPClient.
/// Real simulators over real TLS.
@Suite(.timeLimit(.minutes(1)), .network)
struct WebPushOriginPoolsTests {
    /// Starts one simulator per entry of `http1Only`, a client allowed to reach all of them, runs `body`, and
    /// shuts everything down.
    static func with(
        http1Only: [Bool], configure: (inout WebPushClientConfiguration) -> Void = { _ in },
        _ body: ([WebPushSimulator], WebPushClient, VAPIDSigner) async throws -> Void
    ) async throws {
        let directory = NSTemporaryDirectory() + "pgpush-webpush-origins-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var simulators: [WebPushSimulator] = []
        for only in http1Only {
            var configuration = WebPushSimulatorConfiguration()
            configuration.certificateDirectory = directory
            configuration.endpointHost = "localhost"
            configuration.http1Only = only
            configuration.ledgerKeepsPayloads = true
            configuration.threadCount = 1
            var logger = Logger(label: "pgpush.test.webpush-simulator")
            logger.logLevel = .warning
            let simulator = WebPushSimulator(configuration: configuration, logger: logger)
            try await simulator.start()
            simulators.append(simulator)
        }
        var configuration = WebPushClientConfiguration(
            allowedOrigins: try WebPushOrigins(allowing: simulators.map { $0.origin!.serialized }),
            caFile: simulators[0].caCertificatePath, requestTimeout: .seconds(5))
        configure(&configuration)
        let client = try WebPushClient(configuration: configuration, tokens: try VAPIDTokenCache(), logger: Logger(label: "test"))
        let key = VAPIDKey.generate()
        let signer = VAPIDSigner(key: key, subject: try VAPIDSubject("mailto:ops@example.com"))
        do {
            try await body(simulators, client, signer)
        } catch {
            await client.shutdown()
            for simulator in simulators { await simulator.shutdown() }
            throw error
        }
        await client.shutdown()
        for simulator in simulators { await simulator.shutdown() }
    }

    static func message(on simulator: WebPushSimulator, key: VAPIDKey) throws -> WebPushMessage {
        let made = try #require(try simulator.makeSubscriptions(count: 1, applicationServerKey: key.applicationServerKey).first)
        return WebPushMessage(subscription: made.subscription, plaintext: Array(#"{"title":"Hi"}"#.utf8), timeToLive: 60, urgency: .high)
    }

    /// Sends `count` messages at once, as a slice of a chunk is sent, and returns their answers.
    static func sendTogether(_ count: Int, on simulator: WebPushSimulator, client: WebPushClient, signer: VAPIDSigner) async throws -> [WebPushAnswer] {
        let messages = try (0..<count).map { _ in try message(on: simulator, key: signer.key) }
        let answers = AsyncStream<WebPushAnswer>.makeStream()
        await client.start(messages.map { WebPushDelivery(message: $0) { answers.continuation.yield($0) } }, signer: signer)
        var collected: [WebPushAnswer] = []
        for await answer in answers.stream {
            collected.append(answer)
            if collected.count == count { break }
        }
        return collected
    }

    static let created = WebPushAnswer.answered(status: 201, reason: nil, retryAfter: nil)

    @Test func anHTTP2OriginIsLearnedFromItsFirstAnswerAndThenSentToThroughItsOwnPool() async throws {
        try await Self.with(http1Only: [false]) { simulators, client, signer in
            let simulator = simulators[0]
            let origin = try #require(simulator.origin)
            guard case .asyncHTTPClient = client.origins.route(to: origin) else {
                Issue.record("an origin is unknown until it has answered")
                return
            }
            #expect(await client.send(try Self.message(on: simulator, key: signer.key), signer: signer) == Self.created)
            #expect(client.origins.pooledOrigins == [origin])
            #expect(!client.origins.isHTTP1(origin))

            #expect(try await Self.sendTogether(40, on: simulator, client: client, signer: signer).allSatisfy { $0 == Self.created })
            guard case .http2(let pool) = client.origins.route(to: origin) else {
                Issue.record("an HTTP/2 origin has its pool")
                return
            }
            #expect(pool.statistics.requestsSent == 40, "\(pool.statistics)")
            // Its few long-lived connections all come up, whatever number of streams the push service allows.
            let deadline = ContinuousClock.now + .seconds(10)
            while pool.statistics.connectionsReady < 4, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(pool.statistics.connectionsReady == 4, "\(pool.statistics)")
            #expect(simulator.ledger.acceptedCount(over: .http2) == 41)
            // Decrypted with the subscription's keys, with the headers a push service reads.
            #expect(simulator.ledger.entries.allSatisfy { $0.plaintextString == #"{"title":"Hi"}"# && $0.urgency == .high })
            #expect(simulator.ledger.entries.allSatisfy { $0.subject == "mailto:ops@example.com" })
        }
    }

    @Test func anHTTP1OnlyOriginIsRememberedAndStaysWithTheHTTP1Client() async throws {
        try await Self.with(http1Only: [true]) { simulators, client, signer in
            let simulator = simulators[0]
            let origin = try #require(simulator.origin)
            #expect(await client.send(try Self.message(on: simulator, key: signer.key), signer: signer) == Self.created)
            #expect(client.origins.isHTTP1(origin))
            #expect(client.origins.pooledOrigins.isEmpty)
            #expect(try await Self.sendTogether(20, on: simulator, client: client, signer: signer).allSatisfy { $0 == Self.created })
            #expect(client.origins.pooledOrigins.isEmpty)
            #expect(simulator.ledger.acceptedCount(over: .http1_1) == 21)
            #expect(simulator.statistics.http2Connections == 0)
        }
    }

    @Test func poolsAreBoundedInNumberClosedWhenIdleAndAtShutdown() async throws {
        try await Self.with(http1Only: [false, false], configure: {
            $0.maximumHTTP2Origins = 1
            $0.http2IdleTimeout = .milliseconds(300)
        }) { simulators, client, signer in
            let (first, second) = (try #require(simulators[0].origin), try #require(simulators[1].origin))
            #expect(await client.send(try Self.message(on: simulators[0], key: signer.key), signer: signer) == Self.created)
            #expect(client.origins.pooledOrigins == [first])
            // One pool at most: the second origin's takes the place of the first, which has nothing in flight.
            #expect(await client.send(try Self.message(on: simulators[1], key: signer.key), signer: signer) == Self.created)
            #expect(client.origins.pooledOrigins == [second])
            #expect(try await Self.sendTogether(10, on: simulators[0], client: client, signer: signer).allSatisfy { $0 == Self.created })

            // Nothing sent for longer than the idle timeout: closed, and so are its connections.
            let deadline = ContinuousClock.now + .seconds(10)
            while !client.origins.pooledOrigins.isEmpty, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(client.origins.pooledOrigins.isEmpty)
            #expect(await client.send(try Self.message(on: simulators[1], key: signer.key), signer: signer) == Self.created)
            #expect(client.origins.pooledOrigins == [second])
            await client.origins.shutdown()
            #expect(client.origins.pooledOrigins.isEmpty)
            // Nothing is pooled once shut down, whatever answers come.
            client.origins.learned(first, http2: true)
            #expect(client.origins.pooledOrigins.isEmpty)
        }
    }

    @Test func anOriginWhosePoolCannotConnectIsLearnedAgain() async throws {
        try await Self.with(http1Only: [false]) { simulators, client, signer in
            let simulator = simulators[0]
            let origin = try #require(simulator.origin)
            let later = try Self.message(on: simulator, key: signer.key)
            #expect(await client.send(try Self.message(on: simulator, key: signer.key), signer: signer) == Self.created)
            #expect(client.origins.pooledOrigins == [origin])
            guard case .http2(let pool) = client.origins.route(to: origin) else {
                Issue.record("an HTTP/2 origin has its pool")
                return
            }
            // Wait until the pool's connections are up, then take the push service away.
            let deadline = ContinuousClock.now + .seconds(10)
            while pool.statistics.connectionsReady == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            await simulator.shutdown()
            var answer = await client.send(later, signer: signer)
            // A connection may still be closing when the first request comes: it gets no answer either way.
            for _ in 0..<20 where client.origins.pooledOrigins == [origin] {
                try await Task.sleep(for: .milliseconds(100))
                answer = await client.send(later, signer: signer)
            }
            guard case .noAnswer = answer else {
                Issue.record("expected no answer, got \(answer)")
                return
            }
            #expect(client.origins.pooledOrigins.isEmpty, "the next message learns the origin's version again")
        }
    }
}

/// The request an HTTP/2 pool sends for a Web Push message, and how a push service's answer is read there.
@Suite struct WebPushWireRequestTests {
    @Test func thePathIsTheEndpointsPathAndQueryAndTheHeadersAreLowercase() throws {
        #expect(WebPushWireRequest.path(of: "https://fcm.googleapis.com/fcm/send/abc:def") == "/fcm/send/abc:def")
        #expect(WebPushWireRequest.path(of: "https://127.0.0.1:2199/push/x?y=1#frag") == "/push/x?y=1")
        #expect(WebPushWireRequest.path(of: "https://web.push.apple.com?x=1") == "/?x=1")
        #expect(WebPushWireRequest.path(of: "https://updates.push.services.mozilla.com") == "/")
        #expect(WebPushWireRequest.path(of: "https://[::1]:8443/wpush/v2/a") == "/wpush/v2/a")

        var message = try WebPushClientTests.message(to: "https://fcm.googleapis.com/fcm/send/abc")
        message.urgency = .low
        message.topic = WebPushTopic(collapseID: "score")
        let signer = VAPIDSigner(key: .generate(), subject: try VAPIDSubject("mailto:ops@example.com"))
        let token = try signer.sign(audience: message.subscription.origin, now: Date())
        let request = WebPushWireRequest(message, body: [1, 2, 3], token: token)
        let headers = request.headers(authority: "fcm.googleapis.com", authorization: nil)
        #expect(headers.first(name: ":method") == "POST")
        #expect(headers.first(name: ":path") == "/fcm/send/abc")
        #expect(headers.first(name: ":authority") == "fcm.googleapis.com")
        #expect(headers.first(name: "ttl") == "60")
        #expect(headers.first(name: "content-encoding") == "aes128gcm")
        #expect(headers.first(name: "urgency") == "low")
        #expect(headers.first(name: "topic") == "score")
        #expect(headers.first(name: "authorization") == token.authorization)
        #expect(headers.first(name: "content-length") == "3")
        #expect(headers.allSatisfy { $0.name == $0.name.lowercased() })
        // The same fields AsyncHTTPClient sends over HTTP/1.1.
        for (name, value) in message.headers(authorization: token) {
            #expect(headers.first(name: name.lowercased()) == value, "\(name)")
        }
        #expect(request.body == [1, 2, 3])
    }

    @Test func thePoolReadsAnAnswerAsTheHTTP1ClientDoes() {
        let rules = WebPushRules()
        let refused = rules.response(status: 403, headers: [:], body: Array(#"{"reason":"BadJwtToken"}"#.utf8), keepsBody: false)
        #expect(WebPushClient.answer(of: .response(refused)) == .answered(status: 403, reason: "BadJwtToken", retryAfter: nil))
        let busy = rules.response(status: 429, headers: ["Retry-After": "7"], body: [], keepsBody: false)
        #expect(WebPushClient.answer(of: .response(busy)) == .answered(status: 429, reason: nil, retryAfter: .seconds(7)))
        let late = rules.response(status: 503, headers: ["retry-after": "86400"], body: Array("down\n".utf8), keepsBody: false)
        #expect(WebPushClient.answer(of: .response(late)) == .answered(status: 503, reason: "down", retryAfter: .seconds(3600)))
        let created = rules.response(status: 201, headers: ["location": "/m/1"], body: [], keepsBody: false)
        #expect(WebPushClient.answer(of: .response(created)) == .answered(status: 201, reason: nil, retryAfter: nil))
        guard case .noAnswer = WebPushClient.answer(of: .noResponse(.timeout)) else {
            Issue.record("a timeout is no answer")
            return
        }
        #expect(WebPushPool.outcome(of: WebPushClient.answer(of: .response(created))).status == 200)
    }
}
