import Foundation
import PGPushCore
import PGPushStore
import PGPushTransport

/// APNs requests to devices: the job's header fields encoded once per chunk (``APNsHeaderTemplate``), its
/// payload (or the device's locale variant with its badge) per token.
struct APNsChunkRequests: ChunkRequests {
    /// Reasons that, in numbers, mean a credential for the wrong APNs environment.
    static let wrongCredentialReasons: Set<String> = ["BadDeviceToken"]

    private let topic: String
    private let appTopic: String
    /// The header fields every device's request shares, encoded once for the chunk.
    private let template: APNsHeaderTemplate
    private let payload: [UInt8]
    /// A job with per-device content: its payloads by locale, each with the place of the badge when the job
    /// increments it.
    private let variants: LocaleVariants<SlottedPayload>?

    private struct SlottedPayload: Sendable {
        var bytes: [UInt8]
        var slot: BadgeSlot?
    }

    var provider: PushProvider { .apns }

    init(job: JobDetails, sender: AppSender) throws {
        let pushType = PushType(rawValue: job.pushType) ?? .alert
        topic = sender.topic(for: pushType)
        appTopic = sender.app.topic
        template = APNsHeaderTemplate(
            topic: topic, pushType: pushType, priority: APNsPriority(rawValue: job.apnsPriority),
            expiration: job.expiresAt.map { Int64($0.timeIntervalSince1970) }, collapseID: job.collapseID)
        payload = job.payload
        variants = try ProviderRequests.personalBodies(job, platform: .ios)?.map {
            SlottedPayload(bytes: $0, slot: job.incrementsBadge ? BadgeSlot(in: $0) : nil)
        }
    }

    func request(for token: String, deliveryID: UUID, content: DeviceContent?) -> any PushRequest {
        var bytes = payload
        if let variants {
            let message = variants.best(for: content?.locale)
            bytes = message.slot.map { $0.write(content?.badge ?? ProviderRequests.unknownDeviceBadge, into: message.bytes) }
                ?? message.bytes
        }
        return APNsDeviceRequest(template: template, deviceToken: token, apnsID: deliveryID, payload: bytes)
    }

    func classify(_ outcome: ProviderOutcome) -> (DeliveryClass, Duration?) {
        (PGPushCore.classify(outcome, topic: topic, appTopic: appTopic), nil)
    }
}

/// A Live Activity channel job: its one "token" is the channel's id, sent as one broadcast request.
struct APNsChannelBroadcastRequests: ChunkRequests {
    private let bundleID: String
    private let priority: APNsPriority
    private let expiration: Int64
    private let payload: [UInt8]

    var provider: PushProvider { .apns }
    var isBroadcast: Bool { true }

    init(job: JobDetails, sender: AppSender) {
        bundleID = sender.app.topic
        priority = APNsPriority(rawValue: job.apnsPriority) ?? .immediate
        expiration = job.expiresAt.map { Int64($0.timeIntervalSince1970) } ?? 0
        payload = job.payload
    }

    func request(for token: String, deliveryID: UUID, content: DeviceContent?) -> any PushRequest {
        APNsBroadcastRequest(
            bundleID: bundleID, channelID: token, priority: priority, expiration: expiration, requestID: deliveryID,
            payload: payload)
    }

    func classify(_ outcome: ProviderOutcome) -> (DeliveryClass, Duration?) {
        (classifyBroadcast(outcome), nil)
    }
}
