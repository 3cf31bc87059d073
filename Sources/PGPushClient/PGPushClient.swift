import Foundation
import Logging
import PostgresNIO

/// The producers' Swift client of pgpush's SQL API, on the `PostgresClient` a Vapor or Hummingbird backend
/// already holds.
///
/// Each method is one call of a `push.*` function (or a read of a view) with named parameters and every value
/// bound, so it is the SQL API and nothing beside it: the same validation, the same errors, the same roles
/// (a login in `pgpush_producer`) and app grants. Each method takes an optional `PostgresConnection`: given one,
/// it runs there, inside whatever transaction that connection holds (a transactional outbox: the push commits or
/// rolls back with the caller's own rows); without one, it runs on a pooled connection by itself.
///
/// ```swift
/// let push = PGPushClient(postgres)
/// try await postgres.withTransaction(logger: logger) { connection in
///     // … the order's rows …
///     _ = try await push.enqueue(EnqueueRequest(app: "shop", payload: .apns(.init(alert: "Your order shipped")),
///                                               audience: .userIDs([order.userID])), on: connection)
/// }
/// ```
public struct PGPushClient: Sendable {
    /// The pool every call without a connection runs on. The client never runs or closes it.
    public let postgres: PostgresClient
    /// The logger given to PostgresNIO for each query.
    public var logger: Logger

    public init(_ postgres: PostgresClient, logger: Logger = Logger(label: "pgpush.client")) {
        self.postgres = postgres
        self.logger = logger
    }

    // MARK: Jobs

    /// `push.enqueue(...)`: queues the job and returns its id (the first job's id again for a repeated
    /// ``EnqueueRequest/idempotencyKey``).
    @discardableResult
    public func enqueue(_ request: EnqueueRequest, on connection: PostgresConnection? = nil) async throws -> Int64 {
        let r = request
        let payload = try Self.json(r.payload, field: "payload")
        let fcm = try Self.json(r.fcm, field: "fcm")
        let localized = try Self.json(r.localized, field: "localized")
        let labels = try Self.json(r.labels, field: "labels")
        let web = try Self.json(r.web, field: "web")
        let spreadOver = r.spreadOver.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 }
        return try await value(Int64.self, """
            SELECT push.enqueue(
                app_id => \(r.app)::text,
                payload => \(payload)::jsonb,
                push_type => \(r.effectivePushType?.rawValue)::text,
                apns_priority => \(r.apnsPriority)::integer,
                tokens => \(r.audience.tokens)::text[],
                user_ids => \(r.audience.userIDs)::text[],
                tags => \(r.audience.tags)::text[],
                send_at => coalesce(\(r.sendAt)::timestamptz, now()),
                expires_at => \(r.expiresAt)::timestamptz,
                collapse_id => \(r.collapseID)::text,
                idempotency_key => \(r.idempotencyKey)::text,
                priority => \(r.priority)::integer,
                fcm => \(fcm)::jsonb,
                activity_ids => \(r.audience.activityIDs)::text[],
                activity_type => \(r.activityType)::text,
                channel => \(r.channel)::text,
                localized => \(localized)::jsonb,
                badge => \(r.badge?.rawValue)::text,
                labels => \(labels)::jsonb,
                replace_key => \(r.replaceKey)::text,
                web => \(web)::jsonb,
                web_urgency => \(r.webUrgency?.rawValue)::text,
                max_rate => \(r.maxRate)::integer,
                spread_over => make_interval(secs => \(spreadOver)::double precision),
                local_time => \(r.localTime?.description)::time,
                respect_quiet_hours => \(r.respectQuietHours)::boolean,
                category => \(r.category)::text)
            """, on: connection)
    }

    /// `push.resend_failed(job_id, reasons)`: a new job with the message of `jobID` to its tokens whose outcome
    /// was a failure worth retrying (a 5xx or 429 answer, or none), or one of `reasons` (APNs' or FCM's, such as
    /// `"TopicDisallowed"`); never a token delivered to or pruned. Returns the new job's id, or `nil` when no
    /// token qualifies.
    public func resendFailed(
        jobID: Int64, reasons: [String]? = nil, on connection: PostgresConnection? = nil
    ) async throws -> Int64? {
        try await value(Int64?.self, """
            SELECT push.resend_failed(job_id => \(jobID)::bigint, reasons => \(reasons)::text[])
            """, on: connection)
    }

    /// `push.cancel(job_id)`: stops a queued or running job. `false` when it had already ended; an unknown job (or
    /// another app's, for a login with grants) is ``PGPushClientError/Code-swift.struct/unknown``.
    @discardableResult
    public func cancel(jobID: Int64, on connection: PostgresConnection? = nil) async throws -> Bool {
        try await value(Bool.self, "SELECT push.cancel(job_id => \(jobID)::bigint)", on: connection)
    }

    /// The job's row of `push.job_progress`, or `nil` for a job this login cannot see.
    public func jobProgress(jobID: Int64, on connection: PostgresConnection? = nil) async throws -> JobProgress? {
        let rows = try await rows("""
            SELECT \(unescaped: JobProgress.columns) FROM push.job_progress WHERE job_id = \(jobID)::bigint
            """, on: connection)
        return try rows.first.map { row in try Self.decoding { try JobProgress(row: row) } }
    }

    // MARK: Devices

    /// `push.register_device(...)`: registers or re-registers a device (or a Live Activity's token).
    ///
    /// - Parameters:
    ///   - tags: replace the device's tags (a re-registration without tags clears them, as in SQL).
    ///   - locale: a BCP 47 tag; `nil` keeps the locale the device has.
    ///   - replaces: the device's previous token, deleted; the new one keeps its place, badge and locale.
    ///   - timezone: an IANA zone such as `Europe/Paris` (`TimeZone.current.identifier` on the device), which
    ///     local-time sends and quiet hours go by; `nil` keeps the zone the device has (a device without one
    ///     follows the app's `default_timezone`). A name PostgreSQL does not know is refused (`timezone`).
    public func registerDevice(
        app: String, token: String, platform: Platform = .ios, userID: String? = nil, tags: [String] = [],
        locale: String? = nil, replaces: String? = nil, kind: TokenKind = .device, timezone: String? = nil,
        on connection: PostgresConnection? = nil
    ) async throws {
        _ = try await rows("""
            SELECT push.register_device(
                app_id => \(app)::text,
                token => \(token)::text,
                user_id => \(userID)::text,
                tags => \(tags)::text[],
                replaces => \(replaces)::text,
                platform => \(platform.rawValue)::text,
                token_kind => \(kind.tokenKind)::text,
                activity_id => \(kind.activityID)::text,
                activity_type => \(kind.activityType)::text,
                locale => \(locale)::text,
                timezone => \(timezone)::text)
            """, on: connection)
    }

    /// `push.register_device(platform => 'web', subscription => …)`: registers or re-registers a browser's Web Push
    /// subscription, as the website's backend receives it from `subscription.toJSON()`. The endpoint is the
    /// device's token (for ``setBadge(app:of:to:on:)``, `replaces` and pruning). The database checks the
    /// subscription and names the field it refuses (`subscription`).
    ///
    /// - Parameters:
    ///   - tags: replace the device's tags (a re-registration without tags clears them, as in SQL).
    ///   - locale: a BCP 47 tag; `nil` keeps the locale the device has.
    ///   - replaces: the subscription's previous endpoint (after `pushsubscriptionchange`), deleted.
    ///   - timezone: the browser's IANA zone (`Intl.DateTimeFormat().resolvedOptions().timeZone`); `nil` keeps
    ///     the zone the device has.
    public func registerWebPush(
        app: String, subscription: PushSubscription, userID: String? = nil, tags: [String] = [],
        locale: String? = nil, replaces: String? = nil, timezone: String? = nil, on connection: PostgresConnection? = nil
    ) async throws {
        let json = try Self.json(subscription, field: "subscription")
        _ = try await rows("""
            SELECT push.register_device(
                app_id => \(app)::text,
                token => NULL::text,
                user_id => \(userID)::text,
                tags => \(tags)::text[],
                replaces => \(replaces)::text,
                platform => \(Platform.web.rawValue)::text,
                locale => \(locale)::text,
                subscription => \(json)::jsonb,
                timezone => \(timezone)::text)
            """, on: connection)
    }

    /// `push.set_badge(...)`: sets the badge counters of one device or of a user's devices (0 when the app opens,
    /// so the next increment sends 1). Returns how many devices changed; an unknown token is
    /// ``PGPushClientError/Code-swift.struct/unknown``.
    @discardableResult
    public func setBadge(
        app: String, of devices: BadgeTarget, to value: Int = 0, on connection: PostgresConnection? = nil
    ) async throws -> Int {
        try await Int(self.value(Int64.self, """
            SELECT push.set_badge(
                app_id => \(app)::text,
                token => \(devices.token)::text,
                user_id => \(devices.userID)::text,
                value => \(value)::integer)::bigint
            """, on: connection))
    }

    /// `push.record_open(...)`: the app reports that a notification was opened on a device. `false` when this
    /// (job, device) open was recorded before.
    @discardableResult
    public func recordOpen(
        app: String, token: String, of notification: OpenedNotification, openedAt: Date? = nil,
        on connection: PostgresConnection? = nil
    ) async throws -> Bool {
        try await value(Bool.self, """
            SELECT push.record_open(
                app_id => \(app)::text,
                token => \(token)::text,
                job_id => \(notification.jobID)::bigint,
                apns_id => \(notification.apnsID)::uuid,
                opened_at => coalesce(\(openedAt)::timestamptz, now()))
            """, on: connection)
    }

    // MARK: Running the SQL API

    /// Runs one statement to completion on `connection` (in its transaction) or on a pooled connection.
    func rows(_ query: PostgresQuery, on connection: PostgresConnection?) async throws -> [PostgresRow] {
        do {
            if let connection {
                return try await connection.query(query, logger: logger).collect()
            }
            return try await postgres.query(query, logger: logger).collect()
        } catch {
            throw PGPushClientError.wrapping(error)
        }
    }

    /// Runs a statement that returns one value.
    func value<T: PostgresDecodable>(_ type: T.Type, _ query: PostgresQuery, on connection: PostgresConnection?) async throws -> T {
        guard let row = try await rows(query, on: connection).first else {
            throw PGPushClientError(code: .database, message: "\(query.sql.prefix(40))… returned no row")
        }
        return try Self.decoding { try row.decode(T.self) }
    }

    /// Runs `body`, turning a decoding failure into a client error.
    static func decoding<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw PGPushClientError(code: .database, message: "a row could not be decoded: \(String(reflecting: error))",
                                    underlying: error)
        }
    }

    /// `value`'s JSON text for a `jsonb` parameter; a value that cannot be encoded names its field.
    static func json(_ value: (some Encodable)?, field: String) throws -> String? {
        do {
            return try ClientJSON.text(ifPresent: value)
        } catch {
            throw PGPushClientError(code: .invalidInput, field: field, message: "\(field) could not be encoded as JSON: \(error)",
                                    underlying: error)
        }
    }
}

/// `push.register_device(platform => …)`.
public struct Platform: RawRepresentable, Sendable, Hashable {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let ios = Platform(rawValue: "ios")
    public static let android = Platform(rawValue: "android")
    /// A browser's Web Push subscription: register it with ``PGPushClient/registerWebPush(app:subscription:userID:tags:locale:replaces:on:)``.
    public static let web = Platform(rawValue: "web")
}

/// What a registered token is (`token_kind`, with its `activity_id` or `activity_type`).
public enum TokenKind: Sendable, Hashable {
    /// An ordinary device token.
    case device
    /// A running Live Activity's update token, keyed by the app's own id for the activity; a new token for the
    /// same id replaces the old one.
    case activity(id: String, type: String? = nil)
    /// A push-to-start token of an `ActivityAttributes` type.
    case activityStart(type: String)

    var tokenKind: String {
        switch self {
        case .device: "device"
        case .activity: "activity"
        case .activityStart: "activity_start"
        }
    }

    var activityID: String? { if case .activity(let id, _) = self { id } else { nil } }

    var activityType: String? {
        switch self {
        case .device: nil
        case .activity(_, let type): type
        case .activityStart(let type): type
        }
    }
}

/// The devices `push.set_badge` sets: one token, or every device of a user.
public enum BadgeTarget: Sendable, Hashable {
    case token(String)
    case user(String)

    var token: String? { if case .token(let token) = self { token } else { nil } }
    var userID: String? { if case .user(let user) = self { user } else { nil } }
}

/// The notification an open is recorded for: by its job, or by its delivery's apns-id.
public enum OpenedNotification: Sendable, Hashable {
    case job(Int64)
    case apnsID(UUID)

    var jobID: Int64? { if case .job(let id) = self { id } else { nil } }
    var apnsID: UUID? { if case .apnsID(let id) = self { id } else { nil } }
}
