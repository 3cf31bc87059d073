import Foundation
import Testing

@testable import PGPushDashboard

/// The security rules that need no server: configuration, Basic credentials, the cross-site check.
@Suite struct SecurityTests {
    @Test func actionsNeedThePassword() throws {
        var configuration = DashboardConfiguration()
        configuration.allowActions = true
        #expect(throws: DashboardError.self) { try configuration.validate() }
        configuration.password = "s3cret"
        try configuration.validate()
    }

    @Test func beyondLoopbackNeedsThePasswordEvenReadOnly() throws {
        var configuration = DashboardConfiguration()
        configuration.host = "0.0.0.0"
        #expect(throws: DashboardError.self) { try configuration.validate() }
        configuration.password = "s3cret"
        try configuration.validate()
        configuration.host = "127.0.0.1"
        configuration.password = nil
        try configuration.validate()
    }

    @Test func theErrorNeverCarriesThePassword() {
        var configuration = DashboardConfiguration()
        configuration.host = "10.1.2.3"
        configuration.basePath = "bad"
        configuration.password = "hunter2"
        configuration.allowActions = true
        do {
            try configuration.validate()
            Issue.record("expected a refusal")
        } catch {
            #expect(!error.description.contains("hunter2"))
        }
    }

    @Test func basePathMustBeAPath() {
        var configuration = DashboardConfiguration()
        for bad in ["pgpush", "/pgpush/", "/a\"b"] {
            configuration.basePath = bad
            #expect(throws: DashboardError.self) { try configuration.validate() }
        }
    }

    @Test func basicCredentials() {
        let auth = BasicAuth(user: "admin", password: "s3cret")
        let good = "Basic " + Data("admin:s3cret".utf8).base64EncodedString()
        #expect(auth.accepts(good))
        #expect(auth.accepts("basic " + Data("admin:s3cret".utf8).base64EncodedString()))
        #expect(!auth.accepts("Basic " + Data("admin:s3cre".utf8).base64EncodedString()))
        #expect(!auth.accepts("Basic " + Data("admin:s3cret!".utf8).base64EncodedString()))
        #expect(!auth.accepts("Basic " + Data("root:s3cret".utf8).base64EncodedString()))
        #expect(!auth.accepts("Bearer s3cret"))
        #expect(!auth.accepts(nil))
        #expect(!auth.accepts("Basic !!!"))
    }

    @Test func crossSiteRequestsAreRefused() {
        #expect(SameOrigin.allows(secFetchSite: "same-origin", origin: "http://127.0.0.1:8089", host: "127.0.0.1:8089"))
        #expect(SameOrigin.allows(secFetchSite: nil, origin: nil, host: "127.0.0.1:8089"))
        #expect(!SameOrigin.allows(secFetchSite: "cross-site", origin: nil, host: "127.0.0.1:8089"))
        #expect(!SameOrigin.allows(secFetchSite: "same-site", origin: nil, host: "127.0.0.1:8089"))
        #expect(!SameOrigin.allows(secFetchSite: nil, origin: "http://evil.example", host: "127.0.0.1:8089"))
        #expect(!SameOrigin.allows(secFetchSite: nil, origin: "http://127.0.0.1:9999", host: "127.0.0.1:8089"))
        #expect(!SameOrigin.allows(secFetchSite: nil, origin: "null", host: "127.0.0.1:8089"))
    }
}
