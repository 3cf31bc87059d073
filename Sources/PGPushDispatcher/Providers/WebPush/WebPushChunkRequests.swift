import Foundation
import PGPushCore
import PGPushStore
import PGPushTransport

/// Web Push requests: the job's plaintext, encrypted per subscription by the sender with the subscription's
/// keys (RFC 8291), to the subscription's endpoint.
struct WebPushChunkRequests: ChunkRequests {
    private let plaintext: [UInt8]
    private let expiresAt: Date?
    private let urgency: WebPushUrgency?
    private let topic: WebPushTopic?
    private let keys: [String: WebPushKeys]

    var provider: PushProvider { .webpush }

    init(job: JobDetails, keys: [String: WebPushKeys]) throws {
        guard let message = job.webMessage else {
            throw PGPushError(.invalidInput, "the job has no Web Push message")
        }
        plaintext = message
        expiresAt = job.expiresAt
        urgency = job.webUrgency.flatMap(WebPushUrgency.init(rawValue:))
        topic = WebPushTopic(collapseID: job.collapseID)
        self.keys = keys
    }

    func request(for token: String, deliveryID: UUID, content: DeviceContent?) -> any PushRequest {
        WebPushRequest(endpoint: token, keys: keys[token], plaintext: plaintext, expiresAt: expiresAt, urgency: urgency, topic: topic)
    }

    func classify(_ outcome: ProviderOutcome) -> (DeliveryClass, Duration?) {
        guard case .response(let answer) = outcome else { return (classifyWebPush(outcome), nil) }
        return (classifyWebPush(outcome), answer.retryAfter.flatMap(Int.init).map { .seconds($0) })
    }
}
