import Crypto
import Foundation
import NIOCore
import PGPushCore
import Synchronization

/// One request, whichever HTTP version brought it.
struct WebPushRequest {
    var method: String
    /// The request target, query included.
    var path: String
    var version: WebPushHTTPVersion
    /// Header fields by lowercased name (the first value of each).
    var headers: [String: String]
    var body: ByteBuffer
    /// The body was longer than the connection would read (HTTP/1.1); ``body`` holds only its start.
    var bodyTruncated = false
}

/// The answer to one request.
struct WebPushSimulatorResponse: Sendable {
    var status: Int
    /// `{"reason":…}` in the body; `nil` for 201, which has no body.
    var reason: String?
    /// A human-readable `"message"` beside the reason.
    var message: String?
    /// `Location` of an accepted message.
    var location: String?
    /// `TTL` of an accepted message: the one the push service keeps it for.
    var ttl: Int?
    var retryAfterSeconds: Int?
    /// Recorded in the ledger when (and only if) the response is written.
    var ledgerEntry: WebPushSimulatorLedgerEntry?

    static func refusal(_ status: Int, _ reason: String, _ message: String? = nil) -> WebPushSimulatorResponse {
        WebPushSimulatorResponse(status: status, reason: reason, message: message)
    }

    /// The JSON body, empty without a reason.
    var body: String {
        guard let reason else { return "" }
        var body = #"{"reason":"# + FCMSimulatorJSON.quoted(reason)
        if let message { body += #","message":"# + FCMSimulatorJSON.quoted(message) }
        return body + "}"
    }
}

/// State shared by every connection of one Web Push simulator: configuration, run-time changes, the
/// subscriptions and their keys, and the recorders.
final class WebPushSimulatorContext: Sendable {
    struct Dynamic: Sendable {
        var registry: WebPushSimulatorRegistry
        var faults: WebPushSimulatorFaults
    }

    /// What the simulator keeps of a subscription it made.
    struct KeptSubscription: Sendable {
        var privateKey: P256.KeyAgreement.PrivateKey
        var auth: [UInt8]
        /// The endpoint's origin: what a VAPID token's `aud` must name.
        var origin: WebPushOrigin
        /// The decoded `applicationServerKey` it was made with, if any.
        var pinnedKey: [UInt8]?
    }

    let configuration: WebPushSimulatorConfiguration
    let ledger: WebPushSimulatorLedger
    let statistics = StatisticsRecorder<WebPushSimulatorStatistics>()
    let counters = SimulatorRequestCounters()
    let dynamic: Mutex<Dynamic>
    private let subscriptions = Mutex<[String: KeptSubscription]>([:])
    private let messageCounter = Atomic<UInt64>(0)

    init(configuration: WebPushSimulatorConfiguration) {
        self.configuration = configuration
        self.ledger = WebPushSimulatorLedger(ledgerFile: configuration.ledgerFile)
        self.dynamic = Mutex(Dynamic(registry: configuration.registry, faults: configuration.faults))
    }

    var snapshot: Dynamic { dynamic.withLock { $0 } }

    func keep(_ subscription: WebPushSimulatorSubscription) {
        let kept = KeptSubscription(
            privateKey: subscription.privateKey, auth: subscription.auth, origin: subscription.subscription.origin,
            pinnedKey: subscription.applicationServerKey.flatMap { WebPushBase64URL.decode($0) })
        subscriptions.withLock { $0[subscription.id] = kept }
    }

    func subscription(id: String) -> KeptSubscription? {
        subscriptions.withLock { $0[id] }
    }

    var subscriptionCount: Int { subscriptions.withLock { $0.count } }

    /// The URL of the next accepted message on `origin`.
    func nextLocation(origin: WebPushOrigin) -> String {
        let number = messageCounter.add(1, ordering: .relaxed).newValue
        return origin.serialized + "/message/" + String(number, radix: 16)
    }

    /// The seeded per-message faults: 429, then 503, then 500, each drawn independently per subscription and
    /// attempt.
    func injectedFault(subscriptionID: String, faults: WebPushSimulatorFaults) -> WebPushSimulatorResponse? {
        guard faults.needsAttemptCounting else { return nil }
        let attempt = UInt64(counters.nextAttempt(forToken: subscriptionID))
        func drawn(_ rate: Double, salt: UInt64) -> Bool {
            rate > 0 && FaultHash.unit(FaultHash.hash(subscriptionID, seed: faults.seed, salt: salt << 32 &+ attempt)) < rate
        }
        if drawn(faults.tooManyRequestsRate, salt: 429) {
            var response = WebPushSimulatorResponse.refusal(429, "TooManyRequests", "Too many requests")
            response.retryAfterSeconds = faults.tooManyRequestsRetryAfterSeconds
            return response
        }
        if drawn(faults.serviceUnavailableRate, salt: 503) {
            var response = WebPushSimulatorResponse.refusal(503, "ServiceUnavailable", "The service is unavailable")
            response.retryAfterSeconds = faults.serviceUnavailableRetryAfterSeconds
            return response
        }
        if drawn(faults.internalErrorRate, salt: 500) {
            return .refusal(500, "InternalServerError", "Internal server error")
        }
        return nil
    }

    /// Counts a written answer and ledgers an accepted message.
    func recordWritten(_ response: WebPushSimulatorResponse, version: WebPushHTTPVersion) {
        statistics.update {
            $0.requestsTotal += 1
            $0.requestsByHTTPVersion[version, default: 0] += 1
            $0.responses[WebPushSimulatorStatistics.ResponseKey(status: response.status, reason: response.reason), default: 0] += 1
        }
        if let entry = response.ledgerEntry { ledger.record(entry) }
    }
}
