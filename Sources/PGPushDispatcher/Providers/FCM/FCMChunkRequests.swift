import Foundation
import PGPushCore
import PGPushStore
import PGPushTransport

/// FCM v1 `messages:send` requests: the job's message with each token (or the device's locale variant with its
/// badge), to the app's Firebase project.
struct FCMChunkRequests: ChunkRequests {
    /// The reason recorded when a job's stored Android message cannot be sent (a damaged row).
    static let invalidMessage = "InvalidFCMMessage"
    /// Reasons that, in numbers, mean a credential for the wrong Firebase project.
    static let wrongCredentialReasons: Set<String> = ["SENDER_ID_MISMATCH", "INVALID_ARGUMENT"]

    private let path: String
    private let builder: FCMRequestBodyBuilder
    /// The app's access-token source: it knows when a refreshed token was refused too.
    private let tokens: SharedFCMAccessTokenSource?
    private let variants: LocaleVariants<SlottedMessage>?

    private struct SlottedMessage: Sendable {
        var builder: FCMRequestBodyBuilder
        var slot: BadgeSlot?
    }

    var provider: PushProvider { .fcm }

    init(job: JobDetails, sender: AppSender) throws {
        guard let message = job.fcmMessage, let path = sender.fcmSendPath else {
            throw PGPushError(.invalidInput, "the job has no Android message")
        }
        self.path = path
        builder = try FCMRequestBodyBuilder(message: message)
        tokens = sender.fcmTokens
        variants = try ProviderRequests.personalBodies(job, platform: .android)?.map { message in
            let builder = try FCMRequestBodyBuilder(message: message)
            // The slot sits in the message, after the token: its distance from the end is every body's.
            return SlottedMessage(builder: builder, slot: job.incrementsBadge ? BadgeSlot(in: builder.body(forToken: "")) : nil)
        }
    }

    func request(for token: String, deliveryID: UUID, content: DeviceContent?) -> any PushRequest {
        guard let variants else { return FCMSendRequest(path: path, body: builder.body(forToken: token)) }
        let message = variants.best(for: content?.locale)
        let body = message.builder.body(forToken: token)
        return FCMSendRequest(
            path: path, body: message.slot.map { $0.write(content?.badge ?? ProviderRequests.unknownDeviceBadge, into: body) } ?? body)
    }

    func classify(_ outcome: ProviderOutcome) -> (DeliveryClass, Duration?) {
        guard case .response(let answer) = outcome else { return (PGPushCore.classify(outcome), nil) }
        // A success's body (the message name) is not needed: not parsing it saves most of an answer's cost.
        if answer.status == 200 { return (.delivered, nil) }
        let response = FCMResponse(status: answer.status, body: answer.body, retryAfter: answer.retryAfter, now: Date())
        let classification = PGPushCore.classify(response)
        // One refresh after a 401; a fresh token refused as well is the service account's problem.
        if case .refreshProviderTokenAndRetry(let reason) = classification, tokens?.refreshDidNotHelp == true {
            return (.configurationError(reason: "\(reason): FCM refused a freshly exchanged access token"), nil)
        }
        return (classification, response.retryAfter)
    }
}
