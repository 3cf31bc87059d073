import Testing
@testable import PGPushCore

/// What the answers of APNs' channel management API and of a channel broadcast mean
/// (../shared/LIVE_ACTIVITIES.md, "Errors of the channel and broadcast APIs").
struct ChannelClassifyTests {
    static func answer(_ status: Int, _ reason: String? = nil) -> ProviderOutcome {
        .response(ProviderResponse(status: status, reason: reason))
    }

    @Test(arguments: [
        (201, nil, ChannelManagementVerdict.done),
        (200, nil, .done),
        (204, nil, .done),
        (400, "ChannelNotRegistered", .gone(reason: "ChannelNotRegistered")),
        (400, "BadChannelId", .gone(reason: "BadChannelId")),
        (400, "CannotCreateChannelConfig", .refused(reason: "CannotCreateChannelConfig")),
        (400, "FeatureNotEnabled", .refused(reason: "FeatureNotEnabled")),
        (400, "TopicDisallowed", .refused(reason: "TopicDisallowed")),
        (403, "InvalidProviderToken", .refused(reason: "InvalidProviderToken")),
        (403, "ExpiredProviderToken", .retry(reason: "ExpiredProviderToken")),
        (429, "TooManyRequests", .retry(reason: "TooManyRequests")),
        (500, "InternalServerError", .retry(reason: "InternalServerError")),
        (503, "ServiceUnavailable", .retry(reason: "ServiceUnavailable")),
        (503, nil, .retry(reason: "HTTP503")),
        (404, "BadPath", .refused(reason: "BadPath")),
    ] as [(Int, String?, ChannelManagementVerdict)])
    func managementAnswers(_ status: Int, _ reason: String?, _ expected: ChannelManagementVerdict) {
        #expect(classifyChannelManagement(Self.answer(status, reason)) == expected)
    }

    @Test func aManagementRequestWithoutAnAnswerIsTriedAgain() {
        for reason: ProviderNoResponseReason in [.timeout, .connectionClosed, .refusedStream, .connectFailed(detail: "refused")] {
            guard case .retry = classifyChannelManagement(.noResponse(reason)) else {
                Issue.record("\(reason) is not retried")
                continue
            }
        }
    }

    @Test func aBroadcastAPNsRefusesFailsItsJobAndThrottlingOrCredentialsAreJudgedAsForAnyPush() {
        #expect(classifyBroadcast(Self.answer(200)) == .delivered)
        for reason in ["ChannelNotRegistered", "BadExpirationDate", "FeatureNotEnabled", "MissingChannelId", "BadPriority"] {
            #expect(classifyBroadcast(Self.answer(400, reason)) == .jobError(reason: reason))
        }
        #expect(classifyBroadcast(Self.answer(413, "PayloadTooLarge")) == .jobError(reason: "PayloadTooLarge"))
        #expect(classifyBroadcast(Self.answer(429, "TooManyRequests")) == .retryLater(reason: "TooManyRequests", reconnect: false))
        #expect(classifyBroadcast(Self.answer(503, "ServiceUnavailable")) == classify(Self.answer(503, "ServiceUnavailable")))
        #expect(classifyBroadcast(Self.answer(403, "ExpiredProviderToken")) == .refreshProviderTokenAndRetry(reason: "ExpiredProviderToken"))
        #expect(classifyBroadcast(Self.answer(403, "InvalidProviderToken")) == .configurationError(reason: "InvalidProviderToken"))
    }
}
