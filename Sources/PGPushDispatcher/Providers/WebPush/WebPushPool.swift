import Foundation
import NIOHPACK
import PGPushCore
import PGPushStore
import PGPushTransport

/// One Web Push message as a chunk hands it to its sender: what ``WebPushPool`` encrypts and sends. The
/// subscription's keys stay in their stored form until the message is made, off the chunk's task.
struct WebPushRequest: PushRequest {
    var endpoint: String
    /// Nil for an endpoint that is not a registered subscription of the app (a token list may name one).
    var keys: WebPushKeys?
    /// The job's plaintext, shared by every request of the chunk.
    var plaintext: [UInt8]
    var expiresAt: Date?
    var urgency: WebPushUrgency?
    var topic: WebPushTopic?

    // The client makes the request a push service gets (WebPushWireRequest, or AsyncHTTPClient's): never read.
    func headers(authority: String, authorization: String?) -> HPACKHeaders { [:] }
    var body: [UInt8] { plaintext }
    static var keepsResponseBody: Bool { false }

    /// The message for the push service, its `TTL` counted from `now`.
    func message(now: Date, keys: WebPushKeys) throws(WebPushError) -> WebPushMessage {
        WebPushMessage(
            subscription: try WebPushSubscription(endpoint: endpoint, p256dh: keys.p256dh, auth: keys.auth),
            plaintext: plaintext, timeToLive: WebPushMessage.timeToLive(expiresAt: expiresAt, now: now), urgency: urgency,
            topic: topic)
    }
}

/// An app's Web Push sender, as the worker's other providers have a connection pool: each request is
/// encrypted, signed with the app's VAPID key and sent through the worker's one ``WebPushClient``, whose
/// connections per push-service origin every app shares. A batch is cut into slices of ``sliceSize``, each in
/// its own task (encryption is the costly part and spreads over the cores); the app's gate bounds how many
/// requests are in flight.
final class WebPushPool: PushConnectionPool {
    private let client: WebPushClient
    private let signer: VAPIDSigner
    private let now: @Sendable () -> Date

    init(client: WebPushClient, signer: VAPIDSigner, now: @escaping @Sendable () -> Date = Date.init) {
        self.client = client
        self.signer = signer
        self.now = now
    }

    /// Requests encrypted together in one job on NIO's thread pool and started together: enough that a
    /// write carries many, few enough that a batch's slices keep every core encrypting.
    static let sliceSize = 16

    func start(_ batch: [PushSubmission]) async {
        var start = batch.startIndex
        while start < batch.endIndex {
            let slice = Array(batch[start..<min(start + Self.sliceSize, batch.endIndex)])
            start += Self.sliceSize
            Task { await self.sendSlice(slice) }
        }
    }

    /// Sends a slice of a batch through the client; each submission's outcome comes once.
    private func sendSlice(_ slice: [PushSubmission]) async {
        var deliveries: [WebPushDelivery] = []
        deliveries.reserveCapacity(slice.count)
        let now = now()
        for submission in slice {
            switch message(for: submission.request, now: now) {
            case .success(let message):
                deliveries.append(WebPushDelivery(message: message) { submission.onOutcome(Self.outcome(of: $0)) })
            case .failure(let refusal):
                submission.onOutcome(refusal.outcome)
            }
        }
        await client.start(deliveries, signer: signer)
    }

    func send(_ request: some PushRequest) async -> ProviderOutcome {
        switch message(for: request, now: now()) {
        case .success(let message): Self.outcome(of: await client.send(message, signer: signer))
        case .failure(let refusal): refusal.outcome
        }
    }

    /// Why a request is not sent at all, as its outcome.
    private struct Refusal: Error {
        var outcome: ProviderOutcome
    }

    /// The message for `request`, or why there is none.
    private func message(for request: some PushRequest, now: Date) -> Result<WebPushMessage, Refusal> {
        guard let request = request as? WebPushRequest else {
            return .failure(Refusal(outcome: .noResponse(.notSent(reason: "NotAWebPushRequest"))))
        }
        guard let keys = request.keys else { return .failure(Refusal(outcome: .noResponse(.notSent(reason: Self.unknownSubscription)))) }
        do {
            return .success(try request.message(now: now, keys: keys))
        } catch {
            // Checked at registration: only a damaged row gets here.
            return .failure(Refusal(outcome: .noResponse(.notSent(reason: "InvalidSubscription"))))
        }
    }

    /// The connections belong to the shared client, which the worker closes: nothing to keep here.
    func run() async throws {
        while !Task.isCancelled {
            try await Task.sleep(for: .seconds(3600))
        }
    }

    var statistics: HTTP2PoolStatistics { HTTP2PoolStatistics() }

    /// The reason recorded for an endpoint that is not a registered web subscription of the app: without the
    /// subscription's keys, nothing can be encrypted for it.
    static let unknownSubscription = "UnknownSubscription"

    /// A Web Push answer as every provider's outcome is told: a delivery is status 200, as APNs' and FCM's
    /// are (push services answer 201 Created), so `push.deliveries` means one thing by 200 on every platform.
    static func outcome(of answer: WebPushAnswer) -> ProviderOutcome {
        switch answer {
        case .answered(let status, let reason, let retryAfter):
            return .response(ProviderResponse(
                status: (200..<300).contains(status) ? 200 : status, reason: reason,
                retryAfter: retryAfter.map { String($0.components.seconds) }))
        case .endpointNotAllowed:
            return .noResponse(.notSent(reason: WebPushAnswer.endpointNotAllowedReason))
        case .unsendable:
            return .noResponse(.notSent(reason: "Unsendable"))
        case .noAnswer:
            return .noResponse(.connectFailed(detail: "no answer from the push service"))
        }
    }
}
