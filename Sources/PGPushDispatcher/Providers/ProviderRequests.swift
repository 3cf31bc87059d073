import Foundation
import PGPushCore
import PGPushStore
import PGPushTransport

/// What a provider does with a chunk: it builds each token's request and reads each answer. Gates, rate
/// limits, retries and recording are the same for every provider and stay in ``ChunkProcessor``.
///
/// Each provider's conformance lives in its folder under `Providers/`; ``ProviderRequests/init(chunk:sender:webKeys:)``
/// is the one place that picks it.
protocol ChunkRequests: Sendable {
    /// The provider, as the app's health, metrics and logs name it.
    var provider: PushProvider { get }
    /// Whether each request is a channel broadcast: the job is that one request, so an error the provider gives
    /// it fails the job at once.
    var isBroadcast: Bool { get }
    /// The request for one token, stamped with its delivery id; `content` is the device's own locale and badge
    /// for a job with per-device content.
    func request(for token: String, deliveryID: UUID, content: DeviceContent?) -> any PushRequest
    /// The answer's class, and the wait the provider asked for before a retry.
    func classify(_ outcome: ProviderOutcome) -> (DeliveryClass, Duration?)
}

extension ChunkRequests {
    var isBroadcast: Bool { false }
}

/// A chunk's requests through the provider of its platform (APNs for iOS devices and channels, FCM for Android
/// devices, Web Push for browsers).
struct ProviderRequests: Sendable {
    private let requests: any ChunkRequests

    /// The reason recorded when a job's stored Android message cannot be sent (a damaged row).
    static let invalidFCMMessage = FCMChunkRequests.invalidMessage
    /// Token errors that the app's safety valve counts: many of them mean a credential for the wrong APNs
    /// environment or the wrong Firebase project.
    static let wrongCredentialReasons: Set<String> =
        APNsChunkRequests.wrongCredentialReasons.union(FCMChunkRequests.wrongCredentialReasons)
    /// The badge sent to a device the job increments but the store has no counter for (a token list may name
    /// a token that is not registered): the first step from zero.
    static let unknownDeviceBadge = 1

    @inline(never)
    init(chunk: ClaimedChunk, sender: AppSender, webKeys: [String: WebPushKeys] = [:]) throws {
        let job = chunk.job
        switch chunk.platform {
        case .ios where job.channelID != nil:
            requests = APNsChannelBroadcastRequests(job: job, sender: sender)
        case .ios:
            requests = try APNsChunkRequests(job: job, sender: sender)
        case .android:
            requests = try FCMChunkRequests(job: job, sender: sender)
        case .web:
            requests = try WebPushChunkRequests(job: job, keys: webKeys)
        }
    }

    var provider: PushProvider { requests.provider }
    var isBroadcast: Bool { requests.isBroadcast }

    func request(for token: String, deliveryID: UUID, content: DeviceContent? = nil) -> any PushRequest {
        requests.request(for: token, deliveryID: deliveryID, content: content)
    }

    func classify(_ outcome: ProviderOutcome) -> (DeliveryClass, Duration?) {
        requests.classify(outcome)
    }

    /// A job's messages with per-device content, for a platform that has them: nil when every device gets the
    /// same bytes. (Locale variants and badges are APNs' and FCM's; a web subscription gets the job's message.)
    static func personalBodies(_ job: JobDetails, platform: DevicePlatform) throws -> LocaleVariants<[UInt8]>? {
        guard let pairs = job.personalBodies else { return nil }
        guard let bodies = LocaleVariants<[UInt8]>(pairs: pairs) else {
            throw PGPushError(.invalidInput, "the job has no message for its \(platform.rawValue) devices")
        }
        return bodies
    }
}
