import Crypto
import Foundation
import PGPushCore
import PGPushSimulator
import Testing

@Suite("Web Push simulator: round trips over HTTP/2 and HTTP/1.1", .timeLimit(.minutes(1)), .network)
struct WebPushSimulatorRoundTripTests {
    typealias Harness = WebPushSimulatorHarness

    @Test func http2AcceptsDecryptsAndLedgers() async throws {
        try await Harness.with { harness in
            let subscription = try harness.subscribe()
            let outcome = try await harness.push(
                #"{"title":"Hello","body":"over h2"}"#, to: subscription,
                extraHeaders: [("Urgency", "high"), ("Topic", "news-1")])
            #expect(outcome.status == 201, "\(outcome)")
            #expect(outcome.version == .http2)
            let location = try #require(outcome.headers["location"])
            #expect(location.hasPrefix(harness.origin.serialized + "/message/"))
            #expect(outcome.headers["ttl"] == "60")

            let ledger = harness.simulator.ledger
            #expect(ledger.acceptedCount == 1)
            #expect(ledger.acceptedCount(over: .http2) == 1)
            let entry = try #require(ledger.entries.first)
            #expect(entry.subscriptionID == subscription.id)
            #expect(entry.plaintextString == #"{"title":"Hello","body":"over h2"}"#)
            #expect(entry.ttl == 60)
            #expect(entry.urgency == .high)
            #expect(entry.topic == "news-1")
            #expect(entry.httpVersion == .http2)
            #expect(entry.location == location)
            #expect(entry.applicationServerKey == harness.key.applicationServerKey)
            #expect(entry.subject == Harness.subject)
            #expect(ledger.plaintexts(forSubscription: subscription.id) == [#"{"title":"Hello","body":"over h2"}"#])
            let statistics = harness.simulator.statistics
            #expect(statistics.http2Connections == 1)
            #expect(statistics.http1Connections == 0)
            #expect(statistics.count(status: 201) == 1)
        }
    }

    /// The ALPN port serves HTTP/1.1 to a client that does not offer h2, with keep-alive.
    @Test func http1KeepAliveOnTheALPNPort() async throws {
        try await Harness.with(http1OnlyClient: true) { harness in
            let subscription = try harness.subscribe()
            for index in 0..<3 {
                let outcome = try await harness.push("message \(index)", to: subscription)
                #expect(outcome.status == 201, "\(outcome)")
                #expect(outcome.version == .http1_1)
                #expect(outcome.headers["location"] != nil)
            }
            let ledger = harness.simulator.ledger
            #expect(ledger.acceptedCount(over: .http1_1) == 3)
            #expect(ledger.plaintexts(forSubscription: subscription.id) == ["message 0", "message 1", "message 2"])
            #expect(ledger.duplicates == [subscription.id: 3])
            #expect(ledger.duplicateMessages == 0)
            let statistics = harness.simulator.statistics
            #expect(statistics.http1Connections == 1, "keep-alive: one connection for three requests")
            #expect(statistics.http2Connections == 0)
            #expect(statistics.requestsByHTTPVersion[.http1_1] == 3)
        }
    }

    /// An HTTP/1.1-only origin does not offer h2: a client that offers it gets HTTP/1.1.
    @Test func http1OnlyPortDoesNotOfferH2() async throws {
        try await Harness.with(configure: { $0.http1Only = true }) { harness in
            #expect(!harness.simulator.offersHTTP2)
            let subscription = try harness.subscribe()
            let outcome = try await harness.push("plain old HTTP", to: subscription)
            #expect(outcome.status == 201, "\(outcome)")
            #expect(outcome.version == .http1_1)
            #expect(harness.simulator.ledger.entries.first?.httpVersion == .http1_1)
            #expect(harness.simulator.ledger.entries.first?.plaintextString == "plain old HTTP")
            #expect(harness.simulator.statistics.http2Connections == 0)
        }
    }

    @Test func curlSeesTheALPNOfEachPort() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") else { return }
        func negotiated(_ simulator: WebPushSimulator, _ flag: String) throws -> String {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            process.arguments = ["-s", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", flag,
                                 "--cacert", simulator.caCertificatePath, "-X", "POST",
                                 simulator.origin!.serialized + "/push/unknown"]
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            process.waitUntilExit()
            return String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        }
        try await Harness.with { harness in
            let http2 = try negotiated(harness.simulator, "--http2")
            let http1 = try negotiated(harness.simulator, "--http1.1")
            #expect(http2 == "2 404")
            #expect(http1 == "1.1 404")
        }
        try await Harness.with(configure: { $0.http1Only = true }) { harness in
            let offeredH2 = try negotiated(harness.simulator, "--http2")
            #expect(offeredH2 == "1.1 404")
        }
    }

    @Test func emptyPushCarriesNoContentEncoding() async throws {
        try await Harness.with(configure: { $0.ledgerKeepsPayloads = false }) { harness in
            let subscription = try harness.subscribe()
            let outcome = try await harness.post(subscription.endpoint, headers: [
                ("TTL", "0"), ("Authorization", try harness.authorization()),
            ])
            #expect(outcome.status == 201, "\(outcome)")
            let entry = try #require(harness.simulator.ledger.entries.first)
            #expect(entry.plaintextLength == 0)
            #expect(entry.plaintext == nil, "payloads are not kept unless asked")
            #expect(entry.plaintextSHA256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            #expect(entry.ttl == 0)
        }
    }

    @Test func repeatedMessagesAreCountedAsDuplicates() async throws {
        try await Harness.with { harness in
            let subscription = try harness.subscribe()
            for _ in 0..<2 { #expect(try await harness.push("same", to: subscription).status == 201) }
            #expect(harness.simulator.ledger.duplicateMessages == 1)
        }
    }

    /// What the simulator writes with --web-subscriptions parses as browsers' subscriptions, and what is
    /// encrypted for those decrypts with the keys it keeps.
    @Test func subscriptionsFileHoldsToJSONObjects() async throws {
        try await Harness.with { harness in
            let subscriptions = try harness.simulator.makeSubscriptions(count: 3)
            let path = NSTemporaryDirectory() + "webpush-subscriptions-\(UUID().uuidString).json"
            defer { try? FileManager.default.removeItem(atPath: path) }
            try WebPushSimulatorSubscription.write(subscriptions, toFile: path)
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            let array = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
            #expect(array.count == 3)
            for (object, made) in zip(array, subscriptions) {
                #expect(Set(object.keys) == ["endpoint", "expirationTime", "keys"])
                #expect(object["expirationTime"] is NSNull)
                let parsed = try WebPushSubscription(json: try JSONSerialization.data(withJSONObject: object))
                #expect(parsed == made.subscription)
                #expect(parsed.endpoint.hasPrefix(harness.origin.serialized + "/push/"))
                let body = try WebPushEncryption.encrypt(Array("x".utf8), for: parsed)
                #expect(try made.decrypt(body) == Array("x".utf8))
            }
            #expect(Set(subscriptions.map(\.id)).count == 3)
        }
    }
}

@Suite("Web Push simulator: refusals", .timeLimit(.minutes(1)), .network)
struct WebPushSimulatorRefusalTests {
    typealias Harness = WebPushSimulatorHarness

    @Test func vapidRefusals() async throws {
        try await Harness.with { harness in
            let subscription = try harness.subscribe()
            let missing = try await harness.post(subscription.endpoint, headers: [("TTL", "60")])
            #expect(missing.status == 401)
            #expect(missing.reason == "MissingAuthorization")

            let garbage = try await harness.push("x", to: subscription, authorization: "vapid t=not.a.jwt, k=nope")
            #expect(garbage.status == 401)
            #expect(garbage.reason == "BadAuthorization")

            let bearer = try await harness.push("x", to: subscription, authorization: "Bearer abc")
            #expect(bearer.status == 401)

            let key = P256.Signing.PrivateKey()
            let expired = try Harness.handMadeAuthorization(
                key: key, audience: harness.origin.serialized, subject: Harness.subject, expiresIn: -60)
            #expect(try await harness.push("x", to: subscription, authorization: expired).status == 401)
            let tooLong = try Harness.handMadeAuthorization(
                key: key, audience: harness.origin.serialized, subject: Harness.subject, expiresIn: 25 * 3600)
            let tooLongOutcome = try await harness.push("x", to: subscription, authorization: tooLong)
            #expect(tooLongOutcome.status == 401)
            #expect(tooLongOutcome.body.contains("24 hours"))

            // Another key's signature under this k= does not verify.
            let forged = try harness.authorization().replacingOccurrences(
                of: harness.key.applicationServerKey, with: WebPushBase64URL.encode(key.publicKey.x963Representation))
            #expect(try await harness.push("x", to: subscription, authorization: forged).status == 401)

            let wrongAudience = try await harness.push(
                "x", to: subscription,
                authorization: try harness.authorization(audience: WebPushOrigin(host: "fcm.googleapis.com")))
            #expect(wrongAudience.status == 403)
            #expect(wrongAudience.reason == "BadAudience")
            let otherPort = try await harness.push(
                "x", to: subscription,
                authorization: try harness.authorization(audience: WebPushOrigin(host: harness.origin.host, port: 1)))
            #expect(otherPort.status == 403)

            #expect(harness.simulator.ledger.acceptedCount == 0)
        }
    }

    /// Apple's rule: 403 BadJwtToken for a subject with a space, angle brackets, localhost, a .local host, or
    /// none at all.
    @Test func appleRefusedSubjectIsBadJwtToken() async throws {
        try await Harness.with { harness in
            let subscription = try harness.subscribe()
            let key = P256.Signing.PrivateKey()
            for subject in ["mailto:ops@localhost", "mailto: ops@example.com", "mailto:<ops@example.com>",
                            "https://printer.local/", nil] as [String?] {
                let authorization = try Harness.handMadeAuthorization(
                    key: key, audience: harness.origin.serialized, subject: subject)
                let outcome = try await harness.push("x", to: subscription, authorization: authorization)
                #expect(outcome.status == 403, "\(subject ?? "nil")")
                #expect(outcome.body.hasPrefix(#"{"reason":"BadJwtToken""#), "\(outcome.body)")
            }
            // The same hand-made token with an acceptable subject passes.
            let good = try Harness.handMadeAuthorization(key: key, audience: harness.origin.serialized,
                                                         subject: "https://example.com/contact")
            #expect(try await harness.push("x", to: subscription, authorization: good).status == 201)
            #expect(harness.simulator.statistics.count(reason: "BadJwtToken") == 5)
        }
    }

    @Test func pinnedApplicationServerKeyRefusesOtherKeys() async throws {
        try await Harness.with { harness in
            let pinned = try harness.subscribe(applicationServerKey: harness.key.applicationServerKey)
            #expect(try await harness.push("mine", to: pinned).status == 201)
            let other = VAPIDSigner(key: .generate(), subject: try VAPIDSubject(Harness.subject))
            let refused = try await harness.push(
                "theirs", to: pinned, authorization: try other.sign(audience: harness.origin, now: Date()).authorization)
            #expect(refused.status == 403)
            #expect(refused.reason == "VapidKeyMismatch")
            #expect(harness.simulator.ledger.plaintexts(forSubscription: pinned.id) == ["mine"])
        }
    }

    @Test func headerAndBodyRefusals() async throws {
        try await Harness.with { harness in
            let subscription = try harness.subscribe()
            let noTTL = try await harness.push("x", to: subscription, ttl: nil)
            #expect(noTTL.status == 400)
            #expect(noTTL.reason == "MissingTTL")
            for ttl in ["-1", "abc", "1.5", "", "+5"] {
                let outcome = try await harness.push("x", to: subscription, ttl: ttl)
                #expect(outcome.status == 400, "TTL \(ttl)")
            }
            let urgency = try await harness.push("x", to: subscription, extraHeaders: [("Urgency", "urgent")])
            #expect(urgency.status == 400)
            #expect(urgency.reason == "BadWebPushUrgency")
            for topic in [String(repeating: "a", count: 33), "has space", "dot.ted"] {
                let outcome = try await harness.push("x", to: subscription, extraHeaders: [("Topic", topic)])
                #expect(outcome.status == 400, "Topic \(topic)")
                #expect(outcome.reason == "BadWebPushTopic")
            }
            #expect(try await harness.push("x", to: subscription,
                                          extraHeaders: [("Topic", String(repeating: "a", count: 32))]).status == 201)

            let authorization = try harness.authorization()
            let tooLarge = try await harness.post(
                subscription.endpoint,
                headers: [("TTL", "60"), ("Content-Encoding", "aes128gcm"), ("Authorization", authorization)],
                body: Array(repeating: 7, count: 4097))
            #expect(tooLarge.status == 413)
            #expect(tooLarge.reason == "PayloadTooLarge")

            let body = try WebPushEncryption.encrypt(Array("x".utf8), for: subscription.subscription)
            let noEncoding = try await harness.post(
                subscription.endpoint, headers: [("TTL", "60"), ("Authorization", authorization)], body: body)
            #expect(noEncoding.status == 400)
            #expect(noEncoding.reason == "BadContentEncoding")

            // Encrypted for another subscription, or tampered with: it does not decrypt.
            let other = try harness.subscribe()
            let forOther = try WebPushEncryption.encrypt(Array("x".utf8), for: other.subscription)
            let headers = [("TTL", "60"), ("Content-Encoding", "aes128gcm"), ("Authorization", authorization)]
            let undecryptable = try await harness.post(subscription.endpoint, headers: headers, body: forOther)
            #expect(undecryptable.status == 400)
            #expect(undecryptable.reason == "DecryptionFailed")
            var tampered = body
            tampered[tampered.count - 1] ^= 1
            #expect(try await harness.post(subscription.endpoint, headers: headers, body: tampered).status == 400)

            #expect(harness.simulator.ledger.acceptedCount == 1)
        }
    }

    @Test func goneNotFoundAndUnknownSubscriptions() async throws {
        try await Harness.with { harness in
            let gone = try harness.subscribe(outcome: .gone)
            let notFound = try harness.subscribe(outcome: .notFound)
            #expect(gone.id.hasPrefix("gone-"))
            #expect(notFound.id.hasPrefix("notfound-"))
            let goneOutcome = try await harness.push("x", to: gone)
            #expect(goneOutcome.status == 410)
            #expect(goneOutcome.reason == "Gone")
            #expect(try await harness.push("x", to: notFound).status == 404)

            let unknown = try await harness.post(harness.origin.serialized + "/push/no-such-id", headers: [("TTL", "0")])
            #expect(unknown.status == 404)
            #expect(unknown.reason == "NotFound")
            #expect(harness.simulator.statistics.unknownSubscriptions == 1)
            // An id with the prefix is gone whether or not the simulator made it.
            #expect(try await harness.post(harness.origin.serialized + "/push/gone-abc", headers: [("TTL", "0")]).status == 410)
            #expect(try await harness.post(harness.origin.serialized + "/elsewhere", headers: []).status == 404)

            // A live subscription marked gone at run time, and back.
            let live = try harness.subscribe()
            #expect(try await harness.push("before", to: live).status == 201)
            harness.simulator.mark(live.endpoint, .gone)
            #expect(try await harness.push("after", to: live).status == 410)
            harness.simulator.mark(live.id, .notFound)
            #expect(try await harness.push("after", to: live).status == 404)
            harness.simulator.mark(live.id, .live)
            #expect(try await harness.push("again", to: live).status == 201)
            #expect(harness.simulator.ledger.plaintexts(forSubscription: live.id) == ["before", "again"])
        }
    }
}

@Suite("Web Push simulator: registry")
struct WebPushSimulatorRegistryTests {
    @Test func setsWinOverPrefixes() {
        var registry = WebPushSimulatorRegistry()
        #expect(registry.outcome(forID: "abc") == .live)
        #expect(registry.outcome(forID: "gone-1") == .gone)
        #expect(registry.outcome(forID: "notfound-1") == .notFound)
        registry.mark("abc", .gone)
        #expect(registry.outcome(forID: "abc") == .gone)
        registry.mark("abc", .notFound)
        #expect(registry.outcome(forID: "abc") == .notFound)
        #expect(!registry.gone.contains("abc"))
        registry.goneIDPrefix = nil
        #expect(registry.outcome(forID: "gone-1") == .live)
        #expect(WebPushSimulatorRegistry.Outcome.gone.status == 410)
        #expect(WebPushSimulatorRegistry.Outcome.notFound.status == 404)
    }
}
