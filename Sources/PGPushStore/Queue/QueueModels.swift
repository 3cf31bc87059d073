import Foundation
import PGPushCore

/// Which provider a device, a chunk or an outcome belongs to: `push.devices.platform`.
public enum DevicePlatform: String, Sendable, Hashable, CaseIterable {
    /// APNs.
    case ios
    /// FCM.
    case android
    /// Web Push: the token is the subscription's endpoint.
    case web

    /// The provider its devices are reached through.
    public var provider: PushProvider {
        switch self {
        case .ios: .apns
        case .android: .fcm
        case .web: .webpush
        }
    }
}

/// A chunk this worker holds the lease on.
public struct ClaimedChunk: Sendable, Hashable {
    public enum Kind: String, Sendable {
        /// A key range (lo, hi] over the app's devices, filtered by the job's audience.
        case range
        /// An explicit token list.
        case tokens
    }

    public var id: Int64
    public var jobID: Int64
    public var appID: String
    public var priority: Int
    public var seq: Int
    public var kind: Kind
    public var loToken: String?
    public var hiToken: String?
    public var tokens: [String]
    /// The attempt number every token of this chunk is on (1 for fresh chunks).
    public var attempt: Int
    public var lastReason: String?
    /// How often the chunk has been claimed, this claim included; rescues after expired leases count.
    public var claims: Int
    /// Its size in notifications as counted at expansion (a range chunk's audience may have changed since).
    public var estimatedTokens: Int
    /// The job it belongs to, read by the claim itself.
    public var job: JobDetails
    /// Set when the job failed with a job-level error: its tokens are recorded with this reason, not sent.
    public var jobFailure: String?
    /// Every token of a chunk goes to one provider.
    public var platform: DevicePlatform
    /// The time zone whose devices a key range holds, for a job sent at each zone's own moment (local time,
    /// quiet hours); nil for a range of every zone.
    public var zone: String?

    public init(
        id: Int64, jobID: Int64, appID: String, priority: Int, seq: Int, kind: Kind, loToken: String? = nil,
        hiToken: String? = nil, tokens: [String], attempt: Int = 1, lastReason: String? = nil, claims: Int = 1,
        estimatedTokens: Int, job: JobDetails, jobFailure: String? = nil, platform: DevicePlatform = .ios,
        zone: String? = nil
    ) {
        self.platform = platform
        self.zone = zone
        self.id = id
        self.jobID = jobID
        self.appID = appID
        self.priority = priority
        self.seq = seq
        self.kind = kind
        self.loToken = loToken
        self.hiToken = hiToken
        self.tokens = tokens
        self.attempt = attempt
        self.lastReason = lastReason
        self.claims = claims
        self.estimatedTokens = estimatedTokens
        self.job = job
        self.jobFailure = jobFailure
    }

    /// The order claimed chunks start in: higher priority first, then lower chunk number, then older.
    public static func claimOrder(_ a: ClaimedChunk, _ b: ClaimedChunk) -> Bool {
        (b.priority, a.seq, a.id) < (a.priority, b.seq, b.id)
    }
}

/// What a worker needs to know about a job to send it; the claim returns it with each chunk.
public struct JobDetails: Sendable, Hashable {
    public var id: Int64
    public var appID: String
    /// The exact bytes to send: the jsonb's text form, the same bytes the enqueue validation measured.
    public var payload: [UInt8]
    public var pushType: String
    public var apnsPriority: Int
    public var expiresAt: Date?
    public var collapseID: String?
    public var userIDs: [String]?
    public var tags: [String]?
    /// The Android message (FCM's message fields without the target), for a chunk of Android devices.
    public var fcmMessage: [UInt8]?
    /// The Web Push plaintext (`push.jobs.web`'s text form), for a chunk of web subscriptions.
    public var webMessage: [UInt8]?
    /// The `Urgency` of its Web Push messages (`push.jobs.web_urgency`).
    public var webUrgency: String?
    /// The kind of token the job reaches (`push.jobs.audience_kind`): `device`, `activity` or `activity_start`.
    public var audienceKind: String = "device"
    /// A start's ActivityAttributes type: only push-to-start tokens of that type are in the audience.
    public var activityType: String?
    /// Whether the job updates activities by id (`push.jobs.activity_ids`): only their update tokens are in
    /// the audience. The list itself stays in the job's row.
    public var byActivity = false
    /// APNs' id of the broadcast channel of a channel job, whose one "token" it is: one request to
    /// `/4/broadcasts/apps/<bundle id>` instead of one per device.
    public var channelID: String?
    /// Whether each device gets its own badge counter, plus one (`push.jobs.badge = 'increment'`).
    public var incrementsBadge = false
    /// A job with per-device content (locale variants or a badge increment): its messages for the chunk's
    /// platform, as pairs of locale and body (`push.personal_bodies`; the empty locale is the job's own
    /// message). Nil for a job that sends every device the same bytes.
    public var personalBodies: [String]?

    /// The job's frequency-cap category (`push.jobs.category`).
    public var category: String?
    /// The app's cap for that category, read with the claim; nil when the category has none (never capped).
    public var frequencyCap: FrequencyCap?

    /// Whether the job's devices get messages of their own, read per chunk (``QueueStore/deviceContents(of:tokens:)``).
    public var isPersonal: Bool { personalBodies != nil }

    public init(
        id: Int64, appID: String, payload: [UInt8], pushType: String = "alert", apnsPriority: Int = 10,
        expiresAt: Date? = nil, collapseID: String? = nil, userIDs: [String]? = nil, tags: [String]? = nil
    ) {
        self.id = id
        self.appID = appID
        self.payload = payload
        self.pushType = pushType
        self.apnsPriority = apnsPriority
        self.expiresAt = expiresAt
        self.collapseID = collapseID
        self.userIDs = userIDs
        self.tags = tags
    }
}

/// One app's row: where its credential lives, never the credential itself.
public struct AppRecord: Sendable, Hashable {
    public var id: String
    public var topic: String
    public var environment: String
    public var teamID: String?
    public var keyID: String?
    public var privateKeyPath: String?
    public var certificatePath: String?
    public var certificatePasswordEnv: String?
    public var rateLimit: Int?
    public var pausedReason: String?
    /// The Firebase project and where its service-account file is, for an app with Android devices.
    public var fcmProjectID: String? = nil
    public var fcmServiceAccountPath: String? = nil
    /// Web Push: where the app's VAPID private key is (a P-256 PEM file on the workers), the public key the
    /// website subscribes with (base64url), and the VAPID subject. All three or none.
    public var vapidPrivateKeyPath: String? = nil
    public var vapidPublicKey: String? = nil
    public var vapidSubject: String? = nil
    /// Why the app's Web Push is paused (a push service refused its VAPID key), while its APNs and FCM send on.
    public var webPushPausedReason: String? = nil

    public init(
        id: String, topic: String, environment: String, teamID: String? = nil, keyID: String? = nil,
        privateKeyPath: String? = nil, certificatePath: String? = nil, certificatePasswordEnv: String? = nil,
        rateLimit: Int? = nil, pausedReason: String? = nil, fcmProjectID: String? = nil, fcmServiceAccountPath: String? = nil
    ) {
        self.id = id
        self.topic = topic
        self.environment = environment
        self.teamID = teamID
        self.keyID = keyID
        self.privateKeyPath = privateKeyPath
        self.certificatePath = certificatePath
        self.certificatePasswordEnv = certificatePasswordEnv
        self.rateLimit = rateLimit
        self.pausedReason = pausedReason
        self.fcmProjectID = fcmProjectID
        self.fcmServiceAccountPath = fcmServiceAccountPath
    }
}

/// A web subscription's keys (RFC 8291), base64url as `push.devices` keeps them: what a Web Push message is
/// encrypted for.
public struct WebPushKeys: Sendable, Hashable {
    public var p256dh: String
    public var auth: String

    public init(p256dh: String, auth: String) {
        self.p256dh = p256dh
        self.auth = auth
    }
}

/// A token's final outcome, appended to `push.deliveries`.
public struct FinalOutcome: Sendable, Hashable {
    public var token: String
    /// HTTP status; 0 when no response ever came (e.g. expired before sending).
    public var status: Int
    public var reason: String?
    public var deliveryID: UUID
    public var attempt: Int
    public var sentAt: Date

    public init(token: String, status: Int, reason: String?, deliveryID: UUID, attempt: Int, sentAt: Date) {
        self.token = token
        self.status = status
        self.reason = reason
        self.deliveryID = deliveryID
        self.attempt = attempt
        self.sentAt = sentAt
    }
}

/// A dead or wrong token for the pruner, recorded in the chunk's completion transaction.
public struct PruneCandidate: Sendable, Hashable {
    public var token: String
    public var status: Int
    public var reason: String
    public var apnsTimestamp: Date?

    public init(token: String, status: Int, reason: String, apnsTimestamp: Date?) {
        self.token = token
        self.status = status
        self.reason = reason
        self.apnsTimestamp = apnsTimestamp
    }
}

/// Tokens that go back to the queue as a new 'tokens' chunk.
public struct RequeuedTokens: Sendable, Hashable {
    public var tokens: [String]
    /// The attempt these tokens will be on when next claimed.
    public var attempt: Int
    public var notBefore: Date
    public var lastReason: String?

    public init(tokens: [String], attempt: Int, notBefore: Date, lastReason: String?) {
        self.tokens = tokens
        self.attempt = attempt
        self.notBefore = notBefore
        self.lastReason = lastReason
    }
}

/// Everything one chunk's completion writes, in one transaction.
public struct ChunkCompletion: Sendable {
    public var chunk: ClaimedChunk
    public var outcomes: [FinalOutcome]
    /// Transient failures to retry later, and tokens given back unsent (shutdown, paused app).
    public var requeued: [RequeuedTokens]
    public var pruneCandidates: [PruneCandidate]
    /// Answers from APNs in this chunk, and how many were BadDeviceToken (for the wrong-environment valve).
    public var answered: Int
    public var badDeviceTokens: Int
    /// How many tokens this claim read from the chunk's key range (a 'range' chunk); nil when it did not read
    /// them. The job's total moves by the difference from the chunk's estimate: a device counted at expansion
    /// and gone since is not sent, so it is not counted either (`push.jobs.removed_before_send`).
    public var readTokens: Int?

    public init(
        chunk: ClaimedChunk, outcomes: [FinalOutcome] = [], requeued: [RequeuedTokens] = [],
        pruneCandidates: [PruneCandidate] = [], answered: Int = 0, badDeviceTokens: Int = 0, readTokens: Int? = nil
    ) {
        self.chunk = chunk
        self.outcomes = outcomes
        self.requeued = requeued
        self.pruneCandidates = pruneCandidates
        self.answered = answered
        self.badDeviceTokens = badDeviceTokens
        self.readTokens = readTokens
    }

    /// The reason recorded for tokens that were never sent because the job's `expires_at` passed.
    public static let expiredReason = "Expired"
    /// The reason recorded for tokens not sent because their person reached the job's category cap
    /// (`push.apps.frequency_caps`); counted in `push.jobs.capped`, not as failures.
    public static let frequencyCappedReason = "FrequencyCapped"
}

/// A chunk's tokens and, at the same index, what each device gets (``QueueStore/personalTokens(of:)``); nil for a
/// token that is not a registered device.
public struct PersonalTokens: Sendable {
    public var tokens: [String]
    public var contents: [DeviceContent?]

    public init(tokens: [String], contents: [DeviceContent?]) {
        self.tokens = tokens
        self.contents = contents
    }
}

/// What a device of a job with per-device content gets: its locale picks the variant, and its counter is the
/// badge the job sends it.
public struct DeviceContent: Sendable, Hashable {
    /// The device's locale (lowercase BCP 47), if it has one.
    public var locale: String?
    /// The badge number this job sends the device: its counter after the job's step (a job that increments it).
    public var badge: Int?

    public init(locale: String?, badge: Int?) {
        self.locale = locale
        self.badge = badge
    }
}

/// An app's frequency cap for one category: at most `maximumJobs` jobs per person within `window`.
public struct FrequencyCap: Sendable, Hashable {
    public var maximumJobs: Int
    public var window: Duration

    public init(maximumJobs: Int, window: Duration) {
        self.maximumJobs = maximumJobs
        self.window = window
    }
}
