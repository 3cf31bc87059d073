import Testing
@testable import PGPushCore

/// The expectation for each documented reason, written out independently of ``APNsReasonTable``.
private let documented: [(status: Int, reason: String, expected: DeliveryClass)] = [
    (410, "Unregistered", .tokenDead(reason: "Unregistered", timestampMilliseconds: 1_700_000_000_123)),
    (410, "ExpiredToken", .tokenDead(reason: "ExpiredToken", timestampMilliseconds: 1_700_000_000_123)),
    (400, "BadDeviceToken", .tokenWrongForTopicOrEnvironment(reason: "BadDeviceToken")),
    (400, "DeviceTokenNotForTopic", .tokenWrongForTopicOrEnvironment(reason: "DeviceTokenNotForTopic")),
    (400, "BadCollapseId", .jobError(reason: "BadCollapseId")),
    (400, "BadExpirationDate", .jobError(reason: "BadExpirationDate")),
    (400, "BadMessageId", .configurationError(reason: "BadMessageId")),
    (400, "BadPriority", .jobError(reason: "BadPriority")),
    (400, "BadTopic", .configurationError(reason: "BadTopic")),
    (400, "DuplicateHeaders", .configurationError(reason: "DuplicateHeaders")),
    (400, "InvalidPushType", .jobError(reason: "InvalidPushType")),
    (400, "MissingDeviceToken", .configurationError(reason: "MissingDeviceToken")),
    (400, "MissingTopic", .configurationError(reason: "MissingTopic")),
    (400, "PayloadEmpty", .jobError(reason: "PayloadEmpty")),
    (400, "TopicDisallowed", .configurationError(reason: "TopicDisallowed")),
    (400, "IdleTimeout", .retryLater(reason: "IdleTimeout", reconnect: true)),
    (403, "ExpiredProviderToken", .refreshProviderTokenAndRetry(reason: "ExpiredProviderToken")),
    (403, "BadCertificate", .configurationError(reason: "BadCertificate")),
    (403, "BadCertificateEnvironment", .configurationError(reason: "BadCertificateEnvironment")),
    (403, "Forbidden", .configurationError(reason: "Forbidden")),
    (403, "InvalidProviderToken", .configurationError(reason: "InvalidProviderToken")),
    (403, "MissingProviderToken", .configurationError(reason: "MissingProviderToken")),
    (403, "UnrelatedKeyIdInToken", .configurationError(reason: "UnrelatedKeyIdInToken")),
    (403, "BadEnvironmentKeyIdInToken", .configurationError(reason: "BadEnvironmentKeyIdInToken")),
    (403, "BadEnvironmentKeyInToken", .configurationError(reason: "BadEnvironmentKeyInToken")),
    (404, "BadPath", .configurationError(reason: "BadPath")),
    (405, "MethodNotAllowed", .configurationError(reason: "MethodNotAllowed")),
    (413, "PayloadTooLarge", .jobError(reason: "PayloadTooLarge")),
    (429, "TooManyRequests", .retryLater(reason: "TooManyRequests", reconnect: false)),
    (429, "TooManyProviderTokenUpdates", .retryLater(reason: "TooManyProviderTokenUpdates", reconnect: false)),
    (500, "InternalServerError", .retryLater(reason: "InternalServerError", reconnect: false)),
    (503, "ServiceUnavailable", .retryLater(reason: "ServiceUnavailable", reconnect: false)),
    (503, "Shutdown", .retryLater(reason: "Shutdown", reconnect: true)),
]

@Suite struct ClassifyTests {
    @Test(arguments: documented.indices)
    func everyDocumentedReason(index: Int) {
        let row = documented[index]
        let response = ProviderResponse(status: row.status, reason: row.reason, timestampMilliseconds: 1_700_000_000_123)
        let result = classify(.response(response))
        #expect(result == row.expected, "\(row.status) \(row.reason)")
        #expect(result.reasonForRecord == row.reason)
    }

    @Test func tableHasExactlyTheDocumentedRows() {
        let table = Set(APNsReasonTable.rows.map { "\($0.status) \($0.reason)" })
        let expected = Set(documented.map { "\($0.status) \($0.reason)" })
        #expect(table == expected)
    }

    @Test func delivered() {
        let result = classify(.response(ProviderResponse(status: 200)))
        #expect(result == .delivered)
        #expect(result.reasonForRecord == nil)
        #expect(result.isFinal)
    }

    @Test func onlyProviderTokenUpdatesIsAStorm() {
        for row in documented {
            let result = classify(.response(ProviderResponse(status: row.status, reason: row.reason)))
            #expect(result.isProviderTokenUpdateStorm == (row.reason == "TooManyProviderTokenUpdates"), "\(row.reason)")
        }
    }

    @Test func unknownReasonsFollowTheirStatusFamily() {
        func outcome(_ status: Int, _ reason: String?) -> DeliveryClass {
            classify(.response(ProviderResponse(status: status, reason: reason, timestampMilliseconds: 42)))
        }
        #expect(outcome(400, "SomethingNew") == .permanentFailure(reason: "SomethingNew"))
        #expect(outcome(418, "Teapot") == .permanentFailure(reason: "Teapot"))
        #expect(outcome(403, "NewCredentialProblem") == .configurationError(reason: "NewCredentialProblem"))
        #expect(outcome(404, nil) == .configurationError(reason: "HTTP404"))
        #expect(outcome(410, "Gone") == .tokenDead(reason: "Gone", timestampMilliseconds: 42))
        #expect(outcome(429, nil) == .retryLater(reason: "HTTP429", reconnect: false))
        #expect(outcome(502, "BadGateway") == .retryLater(reason: "BadGateway", reconnect: false))
        #expect(outcome(500, nil) == .retryLater(reason: "HTTP500", reconnect: false))
        #expect(outcome(302, nil) == .configurationError(reason: "UnexpectedStatus302"))
        // A known reason under an unexpected status is not trusted to mean the documented thing.
        #expect(outcome(400, "Unregistered") == .permanentFailure(reason: "Unregistered"))
    }

    @Test func noResponseIsRetriedWithStableReasons() {
        let cases: [(ProviderNoResponseReason, String, Bool)] = [
            (.goAwayNotProcessed(debugReason: nil), "GoAway", true),
            (.goAwayNotProcessed(debugReason: "Shutdown"), "GoAway", true),
            (.goAwayNotProcessed(debugReason: "SomethingNew"), "GoAway", true),
            (.refusedStream, "RefusedStream", false),
            (.connectionClosed, "ConnectionClosed", true),
            (.missingStatus, "MissingStatus", true),
            (.timeout, "Timeout", false),
            (.connectFailed(detail: "connection refused to 10.0.0.1"), "ConnectFailed", true),
        ]
        for (reason, text, reconnect) in cases {
            let result = classify(.noResponse(reason))
            #expect(result == .retryLater(reason: text, reconnect: reconnect), "\(reason)")
            #expect(!result.isFinal)
            #expect(ProviderOutcome.noResponse(reason).status == 0)
        }
    }

    @Test func aTLSRejectionPausesTheAppWithItsReadableReason() {
        let reason = "TLSCertificateExpired: APNs refused the client certificate as expired"
        #expect(classify(.noResponse(.tlsRejected(reason: reason))) == .configurationError(reason: reason))
        #expect(ProviderOutcome.noResponse(.tlsRejected(reason: reason)).status == 0)
    }

    @Test func goAwayCarryingAConfigurationReasonPausesTheApp() {
        for reason in ["BadCertificateEnvironment", "InvalidProviderToken", "TopicDisallowed", "BadTopic"] {
            #expect(classify(.noResponse(.goAwayNotProcessed(debugReason: reason))) == .configurationError(reason: reason))
        }
        #expect(
            classify(.noResponse(.goAwayNotProcessed(debugReason: "ExpiredProviderToken")))
                == .refreshProviderTokenAndRetry(reason: "ExpiredProviderToken")
        )
        let storm = classify(.noResponse(.goAwayNotProcessed(debugReason: "TooManyProviderTokenUpdates")))
        #expect(storm.isProviderTokenUpdateStorm)
    }

    @Test func finality() {
        #expect(!DeliveryClass.retryLater(reason: "x", reconnect: false).isFinal)
        #expect(!DeliveryClass.refreshProviderTokenAndRetry(reason: "x").isFinal)
        #expect(DeliveryClass.tokenDead(reason: "x", timestampMilliseconds: nil).isFinal)
        #expect(DeliveryClass.tokenWrongForTopicOrEnvironment(reason: "x").isFinal)
        #expect(DeliveryClass.configurationError(reason: "x").isFinal)
        #expect(DeliveryClass.permanentFailure(reason: "x").isFinal)
    }
}

@Suite struct TopicScopedClassifyTests {
    static func topicDisallowed() -> ProviderOutcome {
        .response(ProviderResponse(status: 400, reason: "TopicDisallowed"))
    }

    @Test func topicDisallowedForASuffixedTopicFailsTheJobNotTheApp() {
        #expect(classify(Self.topicDisallowed(), topic: "com.example.app.voip", appTopic: "com.example.app") == .jobError(reason: "TopicDisallowed"))
        #expect(classify(Self.topicDisallowed(), topic: "com.example.app.push-type.liveactivity", appTopic: "com.example.app")
            == .jobError(reason: "TopicDisallowed"))
    }

    @Test func topicDisallowedForTheAppsOwnTopicStillPausesTheApp() {
        #expect(classify(Self.topicDisallowed(), topic: "com.example.app", appTopic: "com.example.app") == .configurationError(reason: "TopicDisallowed"))
        #expect(classify(.response(ProviderResponse(status: 400, reason: "BadTopic")), topic: "com.example.app.voip", appTopic: "com.example.app")
            == .configurationError(reason: "BadTopic"))
    }
}
