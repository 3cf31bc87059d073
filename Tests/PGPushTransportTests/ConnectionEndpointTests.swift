import Foundation
import PGPushCore
import Testing

@testable import PGPushTransport

@Suite("APNs endpoint and configuration")
struct ConnectionEndpointTests {
    @Test func parsesLoopbackURLs() throws {
        let ip = try ProviderEndpoint(url: "https://127.0.0.1:2197")
        #expect(ip.host == "127.0.0.1")
        #expect(ip.port == 2197)
        #expect(ip.hostIsIPAddress)
        #expect(ip.authority == "127.0.0.1:2197")

        let name = try ProviderEndpoint(url: "https://localhost:8443/")
        #expect(name.host == "localhost")
        #expect(name.port == 8443)
        #expect(!name.hostIsIPAddress)

        let v6 = try ProviderEndpoint(url: "https://[::1]:9000")
        #expect(v6.host == "::1")
        #expect(v6.hostIsIPAddress)
        #expect(v6.authority == "[::1]:9000")
    }

    @Test func defaultsToPort443() throws {
        let endpoint = try ProviderEndpoint(url: "https://api.sandbox.push.apple.com")
        #expect(endpoint == .sandbox)
        #expect(endpoint.authority == "api.sandbox.push.apple.com")
        #expect(ProviderEndpoint.apple(.production, port: 2197).port == 2197)
    }

    @Test(arguments: ["http://127.0.0.1:80", "https://", "https://host:notaport", "https://host:70000", "https://h/3/device"])
    func rejectsMalformedURLs(_ url: String) {
        #expect(throws: PGPushError.self) { try ProviderEndpoint(url: url) }
    }

    @Test func configurationDefaults() {
        let configuration = HTTP2ClientConfiguration()
        #expect(configuration.connectionsPerPool == 2)
        #expect(configuration.requestTimeout == .seconds(15))
        #expect(configuration.maximumStreamsPerConnectionCap == 1000)
        #expect(configuration.endpoint == .production)
    }

    @Test func backoffIsJitteredWithinBounds() {
        let backoff = ReconnectBackoff(minimum: .milliseconds(100), maximum: .seconds(30))
        var generator = SystemRandomNumberGenerator()
        for failures in 0..<40 {
            let delay = backoff.delay(afterFailures: failures, using: &generator)
            #expect(delay >= .milliseconds(100))
            #expect(delay <= .seconds(30))
        }
        #expect(backoff.delay(afterFailures: 0, using: &generator) == .milliseconds(100))
    }

    @Test func requestHeadersCarryEveryField() throws {
        let request = APNsRequest(
            deviceToken: String(repeating: "ab", count: 32),
            topic: "com.example.app",
            pushType: .background,
            priority: .powerAware,
            expiration: 0,
            collapseID: "c1",
            apnsID: UUID(uuidString: "6F1C1A3E-8E5B-4B8A-9C1D-2E3F4A5B6C7D")!,
            payload: Array(#"{"aps":{}}"#.utf8)
        )
        let token = ProviderToken(jwt: "jwt", issuedAt: Date(), teamID: "TEAM123456", keyID: "KEY1234567")
        let headers = request.headers(authority: "127.0.0.1:2197", authorization: token.authorizationHeaderValue)
        #expect(headers.first(name: ":method") == "POST")
        #expect(headers.first(name: ":path") == "/3/device/" + String(repeating: "ab", count: 32))
        #expect(headers.first(name: ":authority") == "127.0.0.1:2197")
        #expect(headers.first(name: "authorization") == "bearer jwt")
        #expect(headers.first(name: "apns-push-type") == "background")
        #expect(headers.first(name: "apns-priority") == "5")
        #expect(headers.first(name: "apns-expiration") == "0")
        #expect(headers.first(name: "apns-collapse-id") == "c1")
        #expect(headers.first(name: "apns-id") == "6f1c1a3e-8e5b-4b8a-9c1d-2e3f4a5b6c7d")
        #expect(headers.first(name: "content-length") == "10")
        // Per-request values stay out of the HPACK table; the long-lived JWT goes in it.
        let indexing = Dictionary(headers.map { ($0.name, $0.indexable) }, uniquingKeysWith: { first, _ in first })
        #expect(indexing[":path"] == .nonIndexable)
        #expect(indexing["apns-id"] == .nonIndexable)
        #expect(indexing["content-length"] == .nonIndexable)
        #expect(indexing["authorization"] == .indexable)
        #expect(indexing["apns-topic"] == .indexable)
        // Pseudo-header fields first, in the order HTTP/2 requires them before any other.
        #expect(headers.map(\.name).prefix(4) == [":method", ":scheme", ":path", ":authority"])

        // A job's requests share one template: the same block, field for field.
        let template = APNsHeaderTemplate(request)
        let fromTemplate = APNsDeviceRequest(template: template, deviceToken: request.deviceToken, apnsID: request.apnsID, payload: request.payload)
        #expect(fromTemplate.headerBlock(authority: "127.0.0.1:2197", authorization: token.authorizationHeaderValue)
            == request.headerBlock(authority: "127.0.0.1:2197", authorization: token.authorizationHeaderValue))

        var bare = request
        bare.priority = nil
        bare.expiration = nil
        bare.collapseID = nil
        let bareHeaders = bare.headers(authority: "a", authorization: nil)
        #expect(bareHeaders.first(name: "authorization") == nil)
        #expect(bareHeaders.first(name: "apns-priority") == nil)
        #expect(bareHeaders.first(name: "apns-expiration") == nil)
        #expect(bareHeaders.first(name: "apns-collapse-id") == nil)
    }
}
