import Foundation
import Logging
import PGPushCore
import PGPushStore
import PGPushTransport

/// Makes and deletes Live Activity broadcast channels on APNs' channel management API, as `push.channels`
/// asks, and keeps the rows true to APNs: a channel deleted elsewhere is found by comparing with
/// `all-channels`. Every worker takes channel requests (under a lease per row); the reconciling runs on the
/// maintenance leader.
struct ChannelManager: Sendable {
    let configuration: WorkerConfiguration
    let store: any WorkerStore
    let registry: any AppSenders
    let metrics: WorkerMetrics
    let logger: Logger

    /// Requests taken per pass; channel requests are rare, and each pass runs them side by side.
    static let batchSize = 16
    /// Failed requests in a row (429, 5xx, no answer) after which a channel's request is given up.
    static let maximumAttempts = 8
    /// The backoff between them: 1 s doubling up to a minute, with jitter.
    static let retryPolicy = RetryPolicy(maxAttempts: maximumAttempts, baseDelay: .seconds(1), maxDelay: .seconds(60))

    /// Sends every channel request due now.
    func runPending() async throws {
        let work = try await store.claimChannelWork(limit: Self.batchSize, lease: configuration.lease)
        guard !work.isEmpty else { return }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for item in work {
                group.addTask { try await perform(item) }
            }
            try await group.waitForAll()
        }
    }

    private func perform(_ item: ChannelWork) async throws {
        let metadata: Logger.Metadata = ["app": "\(item.appID)", "channel": "\(item.name)", "operation": "\(item.operation.rawValue)"]
        let operation: APNsChannelRequest.Operation
        switch (item.operation, item.channelID) {
        case (.create, _):
            operation = .create(storagePolicy: item.storagePolicy)
        case (.delete, let channelID?):
            operation = .delete(channelID: channelID)
        case (.delete, nil):
            // Deleted before APNs made it: nothing exists there to delete.
            try await store.channelDeleted(item.id, note: "deleted before APNs made it")
            return
        }
        guard let sender = await registry.checkOutSender(for: item.appID, platform: .ios, role: .channels) else {
            // The app is paused with the reason (an unusable credential); its channel waits for it.
            try await retryOrFail(item, reason: "the app's APNs credential cannot be used", metadata: metadata)
            return
        }
        defer { sender.checkIn() }
        let outcome = await sender.pool.send(APNsChannelRequest(bundleID: sender.app.topic, operation: operation, requestID: UUID()))
        let verdict = classifyChannelManagement(outcome)
        metrics.recordChannelRequest(app: item.appID, operation: item.operation.rawValue, status: outcome.status, verdict: verdict)

        switch (item.operation, verdict) {
        case (.create, .done):
            guard case .response(let answer) = outcome, let made = answer.channelID, !made.isEmpty else {
                try await store.channelFailed(item.id, reason: "APNs answered the create without an apns-channel-id header")
                return
            }
            try await store.channelCreated(item.id, channelID: made)
            logger.info("broadcast channel made on APNs", metadata: metadata)
        case (.delete, .done), (.delete, .gone):
            try await store.channelDeleted(item.id)
            logger.info("broadcast channel deleted on APNs", metadata: metadata)
        case (.create, .gone(let reason)), (_, .refused(let reason)):
            try await store.channelFailed(item.id, reason: Self.explain(reason))
            logger.error("APNs refused a channel request", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
        case (_, .retry(let reason)):
            try await retryOrFail(item, reason: reason, metadata: metadata)
        }
    }

    private func retryOrFail(_ item: ChannelWork, reason: String, metadata: Logger.Metadata) async throws {
        let attempt = item.attempts + 1
        guard attempt < Self.maximumAttempts else {
            try await store.channelFailed(item.id, reason: "\(reason): gave up after \(attempt) attempts")
            logger.error("channel request failed too often", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
            return
        }
        var random = SystemRandomNumberGenerator()
        let wait = max(.milliseconds(200), Self.retryPolicy.delay(beforeAttempt: attempt + 1, using: &random))
        try await store.channelRetry(item.id, reason: reason, after: wait)
        logger.warning("channel request will be tried again", metadata: metadata.merging([
            "reason": "\(reason)", "attempt": "\(attempt)", "retry_in": "\(wait)",
        ]) { $1 })
    }

    /// The reason a failed row shows, with what to do about the ones an operator can fix.
    static func explain(_ reason: String) -> String {
        switch reason {
        case "CannotCreateChannelConfig":
            "CannotCreateChannelConfig: APNs allows at most 10,000 channels per app in each environment; delete channels of events that are over"
        case "FeatureNotEnabled":
            "FeatureNotEnabled: the app's App ID does not have the Broadcast capability (Apple's developer portal)"
        default:
            reason
        }
    }

    /// Compares every app's active channels with APNs' `all-channels` and marks the ones it no longer lists as
    /// deleted. An app whose list cannot be had is left as it is until the next pass.
    func reconcile() async throws {
        for app in try await store.activeChannels() {
            guard let sender = await registry.checkOutSender(for: app.appID, platform: .ios, role: .channels) else { continue }
            let outcome = await sender.pool.send(APNsChannelRequest(bundleID: sender.app.topic, operation: .listAll, requestID: UUID()))
            sender.checkIn()
            metrics.recordChannelRequest(app: app.appID, operation: "list", status: outcome.status, verdict: classifyChannelManagement(outcome))
            guard case .response(let answer) = outcome, (200..<300).contains(answer.status),
                  let listed = APNsChannelList.parse(answer.body)
            else {
                logger.warning("could not list the app's channels on APNs; reconciling again next pass", metadata: [
                    "app": "\(app.appID)", "status": "\(outcome.status)",
                ])
                continue
            }
            let gone = try await store.reconcileChannels(appID: app.appID, listed: listed, asOf: app.asOf)
            if !gone.isEmpty {
                logger.warning("channels deleted outside pgpush marked deleted", metadata: [
                    "app": "\(app.appID)", "channels": "\(gone.joined(separator: ","))",
                ])
            }
        }
    }
}
