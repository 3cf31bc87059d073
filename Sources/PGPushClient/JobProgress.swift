import Foundation
import PostgresNIO

/// A job's state (`push.jobs.state`).
public struct JobState: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let queued = JobState(rawValue: "queued")
    public static let running = JobState(rawValue: "running")
    public static let done = JobState(rawValue: "done")
    /// Nothing was delivered; ``JobProgress/failureReason`` says why.
    public static let failed = JobState(rawValue: "failed")
    public static let cancelled = JobState(rawValue: "cancelled")

    /// Every state but `queued` and `running`: the counts are final.
    public var hasEnded: Bool { self != .queued && self != .running }

    public var description: String { rawValue }
}

/// One row of `push.job_progress` (README, "Which devices a job reaches, and how it is counted").
///
/// The per-platform counts are `nil` for a job expanded before migration 0011 (the Web Push ones before 0027). iOS
/// counts are what is neither Android nor Web.
public struct JobProgress: Sendable, Hashable {
    public var jobID: Int64
    public var app: String
    public var state: JobState
    /// Outcomes when ended; while running, the audience counted at expansion, corrected as ranges are read.
    public var total: Int64?
    public var delivered: Int64
    /// Includes ``expired``.
    public var failed: Int64
    public var pruned: Int64
    public var pending: Int64
    public var expired: Int64
    public var priority: Int
    public var createdAt: Date
    public var sendAt: Date
    public var startedAt: Date?
    public var firstSentAt: Date?
    public var finishedAt: Date?
    public var failureReason: String?
    public var iosTotal: Int64?
    public var iosDelivered: Int64?
    public var iosFailed: Int64?
    public var iosPending: Int64?
    public var androidTotal: Int64?
    public var androidDelivered: Int64?
    public var androidFailed: Int64?
    public var androidPending: Int64?
    public var webTotal: Int64?
    public var webDelivered: Int64?
    public var webFailed: Int64?
    public var webPending: Int64?
    /// When the worker read the audience.
    public var audienceAt: Date?
    public var removedBeforeSend: Int64
    public var addedBeforeSend: Int64
    public var cancelledTokens: Int64
    /// The Live Activity broadcast channel's name, for a channel job.
    public var channel: String?
    /// The job's ``EnqueueRequest/labels`` (empty when none).
    public var labels: [String: String]
    public var replaceKey: String?
    /// The job that replaced this one (its state is then `cancelled`).
    public var replacedBy: Int64?
    /// The job this one resends the failures of (``PGPushClient/resendFailed(jobID:reasons:on:)``).
    public var resentFrom: Int64?
    /// Tokens not sent because their person reached the category's frequency cap (``EnqueueRequest/category``):
    /// outcomes with status 0 and reason `FrequencyCapped`, in neither delivered nor failed.
    public var capped: Int64
    /// The rate in effect (notifications per second) of a throttled job once expanded: the lower of its
    /// ``EnqueueRequest/maxRate`` (or audience over ``EnqueueRequest/spreadOver``) and the app's `rate_limit`.
    public var throttle: Double?
    /// When a paced job's last chunk comes due, while it is queued or running.
    public var estimatedFinishAt: Date?
    /// Tokens waiting for their zone's moment (``EnqueueRequest/localTime``, quiet hours).
    public var waitingTokens: Int64
    /// The zones still to come, soonest first, each with its moment.
    public var waitingZones: [WaitingZone]

    /// A zone whose devices wait for their moment.
    public struct WaitingZone: Sendable, Hashable {
        public var zone: String
        public var moment: Date
    }

    /// The view's columns, in the order ``init(row:)`` reads them.
    static let columns = """
        job_id, app_id, state, total, delivered, failed, pruned, pending, expired, priority, created_at, send_at, \
        started_at, first_sent_at, finished_at, failure_reason, ios_total, ios_delivered, ios_failed, ios_pending, \
        android_total, android_delivered, android_failed, android_pending, web_total, web_delivered, web_failed, \
        web_pending, audience_at, removed_before_send, \
        added_before_send, cancelled_tokens, channel, labels::text AS labels, replace_key, replaced_by, resent_from, \
        capped, throttle, estimated_finish_at, waiting_tokens, waiting_zones, waiting_moments
        """

    init(row: PostgresRow) throws {
        let cells = row.makeRandomAccess()
        func cell<T: PostgresDecodable>(_ name: String, _ type: T.Type = T.self) throws -> T {
            try cells[name].decode(T.self)
        }
        jobID = try cell("job_id")
        app = try cell("app_id")
        state = JobState(rawValue: try cell("state"))
        total = try cell("total")
        delivered = try cell("delivered")
        failed = try cell("failed")
        pruned = try cell("pruned")
        pending = try cell("pending")
        expired = try cell("expired")
        priority = Int(try cell("priority", Int32.self))
        createdAt = try cell("created_at")
        sendAt = try cell("send_at")
        startedAt = try cell("started_at")
        firstSentAt = try cell("first_sent_at")
        finishedAt = try cell("finished_at")
        failureReason = try cell("failure_reason")
        iosTotal = try cell("ios_total")
        iosDelivered = try cell("ios_delivered")
        iosFailed = try cell("ios_failed")
        iosPending = try cell("ios_pending")
        androidTotal = try cell("android_total")
        androidDelivered = try cell("android_delivered")
        androidFailed = try cell("android_failed")
        androidPending = try cell("android_pending")
        webTotal = try cell("web_total")
        webDelivered = try cell("web_delivered")
        webFailed = try cell("web_failed")
        webPending = try cell("web_pending")
        audienceAt = try cell("audience_at")
        removedBeforeSend = try cell("removed_before_send")
        addedBeforeSend = try cell("added_before_send")
        cancelledTokens = try cell("cancelled_tokens")
        channel = try cell("channel")
        labels = try cell("labels", String?.self).map { try JSONDecoder().decode([String: String].self, from: Data($0.utf8)) } ?? [:]
        replaceKey = try cell("replace_key")
        replacedBy = try cell("replaced_by")
        resentFrom = try cell("resent_from")
        capped = try cell("capped")
        throttle = try cell("throttle")
        estimatedFinishAt = try cell("estimated_finish_at")
        waitingTokens = try cell("waiting_tokens")
        waitingZones = zip(try cell("waiting_zones", [String]?.self) ?? [], try cell("waiting_moments", [Date]?.self) ?? [])
            .map { WaitingZone(zone: $0, moment: $1) }
    }
}
