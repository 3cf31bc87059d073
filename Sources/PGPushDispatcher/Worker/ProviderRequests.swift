import Foundation
import PGPushTransport
import PGPushCore
import PGPushStore

/// What differs per provider when a chunk is sent: how each token's request is built and how an answer is
/// classified. Everything else (gates, rate limits, retries, recording) is the same for APNs and FCM.
struct ProviderRequests: Sendable {
    private enum Kind: Sendable {
        case apns(topic: String, appTopic: String, pushType: PushType, priority: APNsPriority?, expiration: Int64?,
                  collapseID: String?, payload: [UInt8])
        case fcm(path: String, builder: FCMRequestBodyBuilder, tokens: SharedFCMAccessTokenSource?)
        /// A channel job: its one "token" is the channel's id.
        case apnsBroadcast(bundleID: String, priority: APNsPriority, expiration: Int64, payload: [UInt8])
        /// A chunk of web subscriptions: the job's plaintext, encrypted per subscription by the sender.
        case web(plaintext: [UInt8], expiresAt: Date?, urgency: WebPushUrgency?, topic: WebPushTopic?, keys: [String: WebPushKeys])
    }

    private let kind: Kind
    /// A job with per-device content (``JobDetails/isPersonal``): its messages by locale, each with the place
    /// of the device's badge counter when the job increments it. Nil when every device gets the same bytes.
    private let personal: Personal?

    private enum Personal: Sendable {
        case apns(LocaleVariants<SlottedBody>)
        case fcm(LocaleVariants<SlottedFCMBody>)
    }

    private struct SlottedBody: Sendable {
        var bytes: [UInt8]
        var slot: BadgeSlot?
    }

    private struct SlottedFCMBody: Sendable {
        var builder: FCMRequestBodyBuilder
        var slot: BadgeSlot?
    }

    /// The badge sent to a device the job increments but the store has no counter for (a token list may name
    /// a token that is not registered): the first step from zero.
    static let unknownDeviceBadge = 1

    /// The provider, as the app's health counts it (a channel broadcast counts as APNs).
    var provider: PushProvider {
        switch kind {
        case .fcm: .fcm
        case .web: .webpush
        case .apns, .apnsBroadcast: .apns
        }
    }

    /// Whether each request is a channel broadcast: the job is that one request, so an error APNs gives it
    /// fails the job at once.
    var isBroadcast: Bool {
        if case .apnsBroadcast = kind { return true }
        return false
    }

    /// The reason recorded when a job's stored Android message cannot be sent (a damaged row).
    static let invalidFCMMessage = "InvalidFCMMessage"
    /// Token errors that the app's safety valve counts: many of them mean a credential for the wrong APNs
    /// environment or the wrong Firebase project.
    static let wrongCredentialReasons: Set<String> = ["BadDeviceToken", "SENDER_ID_MISMATCH", "INVALID_ARGUMENT"]

    @inline(never)
    init(chunk: ClaimedChunk, sender: AppSender, webKeys: [String: WebPushKeys] = [:]) throws {
        let job = chunk.job
        personal = try Self.personal(job, platform: chunk.platform)
        switch chunk.platform {
        case .ios where job.channelID != nil:
            kind = .apnsBroadcast(
                bundleID: sender.app.topic, priority: APNsPriority(rawValue: job.apnsPriority) ?? .immediate,
                expiration: job.expiresAt.map { Int64($0.timeIntervalSince1970) } ?? 0, payload: job.payload)
        case .ios:
            let pushType = PushType(rawValue: job.pushType) ?? .alert
            kind = .apns(
                topic: sender.topic(for: pushType), appTopic: sender.app.topic, pushType: pushType,
                priority: APNsPriority(rawValue: job.apnsPriority), expiration: job.expiresAt.map { Int64($0.timeIntervalSince1970) },
                collapseID: job.collapseID, payload: job.payload)
        case .android:
            guard let message = job.fcmMessage, let path = sender.fcmSendPath else {
                throw PGPushError(.invalidInput, "the job has no Android message")
            }
            kind = .fcm(path: path, builder: try FCMRequestBodyBuilder(message: message), tokens: sender.fcmTokens)
        case .web:
            guard let message = job.webMessage else {
                throw PGPushError(.invalidInput, "the job has no Web Push message")
            }
            kind = .web(
                plaintext: message, expiresAt: job.expiresAt, urgency: job.webUrgency.flatMap(WebPushUrgency.init(rawValue:)),
                topic: WebPushTopic(collapseID: job.collapseID), keys: webKeys)
        }
    }

    /// The messages of a job with per-device content, for the chunk's platform.
    private static func personal(_ job: JobDetails, platform: DevicePlatform) throws -> Personal? {
        // A web subscription gets the job's own message (locale variants and badges are APNs' and FCM's).
        guard platform != .web, let pairs = job.personalBodies else { return nil }
        guard let bodies = LocaleVariants<[UInt8]>(pairs: pairs) else {
            throw PGPushError(.invalidInput, "the job has no message for its \(platform.rawValue) devices")
        }
        switch platform {
        case .ios:
            return .apns(bodies.map { SlottedBody(bytes: $0, slot: job.incrementsBadge ? BadgeSlot(in: $0) : nil) })
        case .web:
            return nil
        case .android:
            return .fcm(try bodies.map { message in
                let builder = try FCMRequestBodyBuilder(message: message)
                // The slot sits in the message, after the token: its distance from the end is every body's.
                return SlottedFCMBody(builder: builder, slot: job.incrementsBadge ? BadgeSlot(in: builder.body(forToken: "")) : nil)
            })
        }
    }

    func request(for token: String, deliveryID: UUID, content: DeviceContent? = nil) -> any PushRequest {
        switch kind {
        case .apns(let topic, _, let pushType, let priority, let expiration, let collapseID, let payload):
            var bytes = payload
            if case .apns(let variants) = personal {
                let message = variants.best(for: content?.locale)
                bytes = message.slot.map { $0.write(content?.badge ?? Self.unknownDeviceBadge, into: message.bytes) } ?? message.bytes
            }
            return APNsRequest(
                deviceToken: token, topic: topic, pushType: pushType, priority: priority, expiration: expiration,
                collapseID: collapseID, apnsID: deliveryID, payload: bytes)
        case .fcm(let path, let builder, _):
            if case .fcm(let variants) = personal {
                let message = variants.best(for: content?.locale)
                let body = message.builder.body(forToken: token)
                return FCMSendRequest(
                    path: path, body: message.slot.map { $0.write(content?.badge ?? Self.unknownDeviceBadge, into: body) } ?? body)
            }
            return FCMSendRequest(path: path, body: builder.body(forToken: token))
        case .apnsBroadcast(let bundleID, let priority, let expiration, let payload):
            return APNsBroadcastRequest(
                bundleID: bundleID, channelID: token, priority: priority, expiration: expiration, requestID: deliveryID,
                payload: payload)
        case .web(let plaintext, let expiresAt, let urgency, let topic, let keys):
            return WebPushRequest(
                endpoint: token, keys: keys[token], plaintext: plaintext, expiresAt: expiresAt, urgency: urgency, topic: topic)
        }
    }

    /// The answer's class, and the wait the provider asked for before a retry.
    func classify(_ outcome: ProviderOutcome) -> (DeliveryClass, Duration?) {
        switch kind {
        case .apns(let topic, let appTopic, _, _, _, _, _):
            return (PGPushCore.classify(outcome, topic: topic, appTopic: appTopic), nil)
        case .apnsBroadcast:
            return (classifyBroadcast(outcome), nil)
        case .fcm(_, _, let tokens):
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
        case .web:
            guard case .response(let answer) = outcome else { return (classifyWebPush(outcome), nil) }
            return (classifyWebPush(outcome), answer.retryAfter.flatMap(Int.init).map { .seconds($0) })
        }
    }
}
