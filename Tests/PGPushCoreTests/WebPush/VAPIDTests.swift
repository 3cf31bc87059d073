import Crypto
import Foundation
import Testing
import PGPushCore

/// SEC1 `ECPrivateKey` DER (RFC 5915) for a P-256 key, built by hand so the SEC1 path is tested without key files.
private func vapidSEC1PEM(of key: P256.Signing.PrivateKey) -> String {
    var der: [UInt8] = [0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20]
    der += key.rawRepresentation
    der += [0xA0, 0x0A, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]
    der += [0xA1, 0x44, 0x03, 0x42, 0x00]
    der += key.publicKey.x963Representation
    let body = Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
    return "-----BEGIN EC PRIVATE KEY-----\n\(body)\n-----END EC PRIVATE KEY-----\n"
}

private func jsonObject(_ part: Substring) throws -> [String: Any] {
    let bytes = try #require(WebPushBase64URL.decode(part))
    return try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
}

@Suite struct VAPIDKeyTests {
    @Test func generatedKeyRoundTripsThroughPEM() throws {
        let key = VAPIDKey.generate()
        #expect(key.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let loaded = try VAPIDKey(pemRepresentation: key.privateKeyPEM)
        #expect(loaded.applicationServerKey == key.applicationServerKey)
    }

    @Test func applicationServerKeyIsTheUncompressedPublicKey() throws {
        let key = VAPIDKey.generate()
        let bytes = try #require(WebPushBase64URL.decode(key.applicationServerKey))
        #expect(bytes.count == 65 && bytes.first == 0x04)
        #expect(bytes == Array(key.publicKey.x963Representation))
        #expect(key.applicationServerKey.count == 87 && !key.applicationServerKey.contains("="))
        #expect(try VAPIDKey.publicKey(applicationServerKey: key.applicationServerKey).rawRepresentation == key.publicKey.rawRepresentation)
    }

    @Test func readsPKCS8AndSEC1() throws {
        let raw = P256.Signing.PrivateKey()
        let expected = WebPushBase64URL.encode(raw.publicKey.x963Representation)
        #expect(try VAPIDKey(pemRepresentation: raw.pemRepresentation).applicationServerKey == expected)
        #expect(try VAPIDKey(pemRepresentation: vapidSEC1PEM(of: raw)).applicationServerKey == expected)
    }

    @Test func readsAPEMFile() throws {
        let key = VAPIDKey.generate()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vapid-\(UUID().uuidString).pem").path
        try key.privateKeyPEM.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(try VAPIDKey(pemFile: path).applicationServerKey == key.applicationServerKey)
    }

    @Test func errorsAndDescriptionsNeverShowTheKey() throws {
        let key = VAPIDKey.generate()
        let pemLine = String(key.privateKeyPEM.split(separator: "\n")[1].prefix(40))
        #expect(!key.description.contains(pemLine))
        #expect(!String(reflecting: key).contains(pemLine))
        var dumped = ""
        dump(key, to: &dumped)
        #expect(!dumped.contains(pemLine))

        // A PEM that is not a P-256 key, garbage in PEM armour, and a P-384 key.
        let garbage = "-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVUU0VDUkVU\n-----END PRIVATE KEY-----\n"
        let p384 = P384.Signing.PrivateKey().pemRepresentation
        for pem in [garbage, p384, "", String(key.privateKeyPEM.dropLast(30))] {
            do {
                _ = try VAPIDKey(pemRepresentation: pem)
                Issue.record("a bad PEM was accepted")
            } catch {
                #expect(error.code == .invalidVAPIDKey)
                #expect(!error.description.contains("U0VDUkVU"))
                #expect(!error.description.contains(pemLine))
            }
        }

        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vapid-\(UUID().uuidString).pem").path
        try garbage.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            _ = try VAPIDKey(pemFile: path)
            Issue.record("a bad PEM file was accepted")
        } catch {
            #expect(error.code == .invalidVAPIDKey)
            #expect(error.message.contains(path))
            #expect(!error.description.contains("U0VDUkVU"))
        }
        #expect(throws: WebPushError.self) { try VAPIDKey(pemFile: path + ".missing") }
    }

    @Test func refusesABadApplicationServerKey() {
        #expect(throws: WebPushError.self) { try VAPIDKey.publicKey(applicationServerKey: "BCVx") }
        var offCurve = Array(VAPIDKey.generate().publicKey.x963Representation)
        offCurve[64] ^= 1
        #expect(throws: WebPushError.self) { try VAPIDKey.publicKey(applicationServerKey: WebPushBase64URL.encode(offCurve)) }
    }
}

@Suite struct VAPIDSignerTests {
    let key = VAPIDKey.generate()
    let origin = try! WebPushOrigin(parsing: "https://fcm.googleapis.com")
    let now = Date(timeIntervalSince1970: 1_700_000_000.7)

    func signer(_ subject: String = "mailto:ops@example.com") throws -> VAPIDSigner {
        try VAPIDSigner(key: key, subject: VAPIDSubject(subject))
    }

    @Test func tokenHeaderClaimsAndSignature() throws {
        let token = try signer().sign(audience: origin, now: now)
        let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        #expect(String(decoding: try #require(WebPushBase64URL.decode(parts[0])), as: UTF8.self) == #"{"typ":"JWT","alg":"ES256"}"#)
        let claims = try jsonObject(parts[1])
        #expect(claims.count == 3)
        #expect(claims["aud"] as? String == "https://fcm.googleapis.com")
        let exp: Int64 = try #require((claims["exp"] as? NSNumber)?.int64Value)
        #expect(exp == 1_700_043_200)  // now, truncated to whole seconds, plus 12 h
        #expect(claims["sub"] as? String == "mailto:ops@example.com")
        #expect(token.expiresAt == Date(timeIntervalSince1970: 1_700_000_000 + 12 * 3600))
        #expect(token.audience == origin)

        let signatureBytes = try #require(WebPushBase64URL.decode(parts[2]))
        #expect(signatureBytes.count == 64)
        #expect(!token.jwt.contains("="))
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        #expect(key.publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))

        #expect(token.authorization == "vapid t=\(token.jwt), k=\(key.applicationServerKey)")
        #expect(!token.description.contains(token.jwt))
    }

    @Test func audienceIsTheOriginWithItsPort() throws {
        let token = try signer().sign(audience: WebPushOrigin(parsing: "https://127.0.0.1:8443"), now: now)
        let claims = try jsonObject(token.jwt.split(separator: ".")[1])
        #expect(claims["aud"] as? String == "https://127.0.0.1:8443")
    }

    @Test func lifetimeIsAtMost24Hours() throws {
        let day = try signer().sign(audience: origin, now: now, lifetime: 24 * 3600)
        #expect(day.expiresAt == Date(timeIntervalSince1970: 1_700_000_000 + 24 * 3600))
        for lifetime in [24 * 3600 + 1, 0, -5, .nan] as [TimeInterval] {
            #expect { try signer().sign(audience: origin, now: now, lifetime: lifetime) } throws: { error in
                (error as? WebPushError)?.code == .invalidVAPIDLifetime
            }
        }
    }

    @Test func verifierAcceptsWhatTheSignerMakes() throws {
        let token = try signer("https://example.com/contact").sign(audience: origin, now: now)
        let claims = try VAPIDVerifier.verify(authorization: token.authorization, now: now)
        #expect(claims.audience == "https://fcm.googleapis.com")
        #expect(claims.subject == "https://example.com/contact")
        #expect(claims.expiresAt == token.expiresAt)
        #expect(claims.applicationServerKey == key.applicationServerKey)
    }

    @Test func verifierRefusesTamperedExpiredAndForeignTokens() throws {
        let token = try signer().sign(audience: origin, now: now)
        let parts = token.jwt.split(separator: ".").map(String.init)
        let forgedClaims = WebPushBase64URL.encode(Array(#"{"aud":"https://web.push.apple.com","exp":1700043200,"sub":"mailto:ops@example.com"}"#.utf8))
        let other = VAPIDKey.generate()
        let cases = [
            "vapid t=\(parts[0]).\(forgedClaims).\(parts[2]), k=\(key.applicationServerKey)",
            "vapid t=\(token.jwt), k=\(other.applicationServerKey)",
            "Bearer \(token.jwt)",
            "vapid k=\(key.applicationServerKey)",
            "vapid t=\(parts[0]).\(parts[1]), k=\(key.applicationServerKey)",
        ]
        for header in cases {
            #expect(throws: WebPushError.self, "\(header.prefix(12))") {
                try VAPIDVerifier.verify(authorization: header, now: now)
            }
        }
        #expect(throws: WebPushError.self) {
            try VAPIDVerifier.verify(authorization: token.authorization, now: token.expiresAt)
        }
        #expect(throws: WebPushError.self) {
            try VAPIDVerifier.verify(authorization: token.authorization, now: now.addingTimeInterval(-13 * 3600))
        }
    }

    @Test func subjectIsEscapedInTheClaims() throws {
        // A subject can hold characters JSON escapes (a quote); the claims stay valid JSON.
        let token = try signer(#"mailto:"o.ps"@example.com"#).sign(audience: origin, now: now)
        let claims = try jsonObject(token.jwt.split(separator: ".")[1])
        #expect(claims["sub"] as? String == #"mailto:"o.ps"@example.com"#)
    }
}

@Suite struct VAPIDTokenCacheTests {
    let clock = ManualWallClock(Date(timeIntervalSince1970: 1_700_000_000))
    let fcm = try! WebPushOrigin(parsing: "https://fcm.googleapis.com")
    let apple = try! WebPushOrigin(parsing: "https://web.push.apple.com")
    let signer = try! VAPIDSigner(key: .generate(), subject: VAPIDSubject("mailto:ops@example.com"))

    @Test func reusesATokenUntilItIsWithinTheRenewalMargin() throws {
        let cache = try VAPIDTokenCache(clock: clock)
        let first = try cache.token(for: fcm, signer: signer)
        #expect(first.expiresAt == clock.now().addingTimeInterval(12 * 3600))
        clock.advance(by: 11 * 3600 - 1)
        #expect(try cache.token(for: fcm, signer: signer) == first)
        #expect(cache.signCount == 1)
        clock.advance(by: 1)  // exactly 1 h before exp: renewed
        let second = try cache.token(for: fcm, signer: signer)
        #expect(second != first)
        #expect(second.expiresAt == clock.now().addingTimeInterval(12 * 3600))
        #expect(cache.signCount == 2)
        #expect(try cache.token(for: fcm, signer: signer) == second)
    }

    @Test func keyedByKeySubjectAndOrigin() throws {
        let cache = try VAPIDTokenCache(clock: clock)
        let fcmToken = try cache.token(for: fcm, signer: signer)
        let appleToken = try cache.token(for: apple, signer: signer)
        #expect(fcmToken != appleToken)
        #expect(appleToken.audience == apple)

        let otherKey = VAPIDSigner(key: .generate(), subject: signer.subject)
        let otherKeyToken = try cache.token(for: fcm, signer: otherKey)
        #expect(otherKeyToken.applicationServerKey != fcmToken.applicationServerKey)

        let otherSubject = try VAPIDSigner(key: signer.key, subject: VAPIDSubject("https://example.com"))
        #expect(try cache.token(for: fcm, signer: otherSubject) != fcmToken)
        #expect(cache.signCount == 4)
        #expect(cache.count == 4)
        #expect(try cache.token(for: fcm, signer: signer) == fcmToken)
        #expect(cache.signCount == 4)
    }

    @Test func dropsExpiredTokensAndRenewsAfterTheClockWentBack() throws {
        let cache = try VAPIDTokenCache(clock: clock, lifetime: 2 * 3600, renewalMargin: 600)
        _ = try cache.token(for: fcm, signer: signer)
        clock.advance(by: 3 * 3600)
        _ = try cache.token(for: apple, signer: signer)
        #expect(cache.count == 1)  // the expired fcm token is gone

        let appleToken = try cache.token(for: apple, signer: signer)
        clock.advance(by: -23 * 3600)  // now exp is more than 24 h away: push services would refuse it
        #expect(try cache.token(for: apple, signer: signer) != appleToken)
        cache.removeAll()
        #expect(cache.count == 0)
    }

    @Test func refusesImpossibleLifetimes() {
        for (lifetime, margin) in [(3600.0, 3600.0), (25 * 3600.0, 3600.0), (3600.0, -1.0), (0.0, 0.0)] {
            #expect(throws: WebPushError.self) { try VAPIDTokenCache(clock: clock, lifetime: lifetime, renewalMargin: margin) }
        }
    }

    @Test func concurrentCallersShareOneToken() async throws {
        let cache = try VAPIDTokenCache(clock: clock)
        let signer = self.signer, fcm = self.fcm
        let tokens = try await withThrowingTaskGroup(of: VAPIDToken.self) { group in
            for _ in 0..<32 { group.addTask { try cache.token(for: fcm, signer: signer) } }
            return try await group.reduce(into: Set<VAPIDToken>()) { $0.insert($1) }
        }
        #expect(tokens.count == 1)
        #expect(cache.signCount == 1)
    }
}

@Suite struct VAPIDSubjectTests {
    @Test(arguments: [
        "mailto:ops@example.com",
        "mailto:first.last+push@sub.example.org",
        "https://example.com",
        "https://example.com/contact",
        "https://push.example.co.uk:8443/about?x=1",
        "mailto:ops@xn--bcher-kva.example",
    ])
    func acceptsRealContacts(subject: String) throws {
        #expect(try VAPIDSubject(subject).value == subject)
    }

    @Test(arguments: [
        ("mailto:ops@localhost", "Apple's push service refuses a VAPID subject on localhost (403 BadJwtToken)"),
        ("mailto: ops@example.com", "whitespace"),
        ("mailto:<ops@example.com>", "angle brackets"),
        ("https://example.local", "on a .local host"),
        ("mailto:ops@printer.LOCAL", "on a .local host"),
        ("https://localhost:8443/", "on localhost"),
        ("https://api.localhost", "on localhost"),
        ("mailto:ops@127.0.0.1", "IP address"),
        ("https://192.168.1.1/contact", "IP address"),
        ("https://[::1]/", "IP address"),
        ("mailto:ops@example", "no dot"),
        ("mailto:ops@example.123", "top-level domain is not letters"),
        ("mailto:ops@example.com.", "not a host name"),
        ("mailto:ops@example.com?subject=push", "not a host name"),
        ("mailto:@example.com", "nothing before the @"),
        ("mailto:ops@team@example.com", "exactly one @"),
        ("mailto:ops.example.com", "exactly one @"),
        ("ops@example.com", "does not start with mailto: or https:"),
        ("MAILTO:ops@example.com", "does not start with mailto: or https:"),
        ("http://example.com", "does not start with mailto: or https:"),
        ("https:example.com", "not an https://host/"),
        ("mailto:ops@exämple.com", "non-ASCII"),
        ("mailto:ops@example.com\t", "whitespace"),
        ("", "empty"),
    ])
    func refusesWhatApplesPushServiceRefuses(subject: String, reason: String) {
        do {
            _ = try VAPIDSubject(subject)
            Issue.record("\(subject) was accepted")
        } catch {
            #expect(error.code == .invalidVAPIDSubject)
            #expect(error.field == "subject")
            #expect(error.message.contains(reason), "\(error.message)")
            if !subject.isEmpty { #expect(error.message.contains("BadJwtToken")) }
        }
    }
}
