import Foundation
import Logging
import NIOCore
import PostgresNIO

/// One device of an import file, with the line it came from (the last line of a repeated token wins).
public struct DeviceRecord: Equatable, Sendable {
    public var line: Int
    public var token: String
    public var userID: String?
    public var tags: [String]
    public var platform: DevicePlatform
    /// A BCP 47 tag such as `fr_CA` or `fr-ca`, normalised by `push.normalize_locale` on import; `nil` keeps the
    /// locale the device has, as a registration without one does.
    public var locale: String?
    /// A Web Push subscription's keys (base64url without padding), checked by the caller; `nil` for a token. The
    /// token is then the subscription's endpoint.
    public var webP256dh: String?
    public var webAuth: String?
    /// An IANA time zone such as `Europe/Paris`, checked by `push.is_time_zone` on import; `nil` keeps the zone the
    /// device has (and a device without one follows the app's `default_timezone`).
    public var timezone: String?

    public init(
        line: Int, token: String, userID: String?, tags: [String], platform: DevicePlatform = .ios, locale: String? = nil,
        webP256dh: String? = nil, webAuth: String? = nil, timezone: String? = nil
    ) {
        self.line = line
        self.token = token
        self.userID = userID
        self.tags = tags
        self.platform = platform
        self.locale = locale
        self.webP256dh = webP256dh
        self.webAuth = webAuth
        self.timezone = timezone
    }
}

/// A device file names a time zone PostgreSQL does not know: the first such line, and the name as given.
public struct UnknownTimeZone: Error, Sendable, Hashable {
    public var line: Int
    public var timezone: String
}

extension OperatorStore {
    /// Whether the app has Web Push configured (a VAPID key), as push.register_device requires of a web device;
    /// `nil` for an unknown app.
    public func appHasWebPush(_ appID: String) async throws -> Bool? {
        try await run("SELECT vapid_public_key IS NOT NULL FROM push.apps WHERE id = \(appID)").first?.decode(Bool.self)
    }
}

/// What an import changed.
public struct DeviceImportResult: Sendable {
    public var inserted: Int64
    public var updated: Int64
}

extension OperatorStore {
    /// Bytes of COPY data per message.
    static let importBatchBytes = 1 << 20

    /// Loads the records with COPY into a temporary table, then upserts them in the same transaction, which
    /// holds the app's row against deletion. An existing device keeps its user id and tags unless the file has
    /// that column (`replaceUserIDs`, `replaceTags`), and its locale unless the record has one (as
    /// push.register_device does). Locales are normalised by push.normalize_locale; one that is not a BCP 47
    /// tag fails the devices_locale_form check and nothing is imported. Time zones are checked by
    /// push.is_time_zone, as push.register_device checks them: the first unknown one throws ``UnknownTimeZone``
    /// naming its line, and nothing is imported; a record without one keeps the device's. `nil` for an unknown app.
    public func importDevices(
        appID: String, records: [DeviceRecord], replaceUserIDs: Bool, replaceTags: Bool
    ) async throws -> DeviceImportResult? {
        let logger = self.logger
        return try await connection.withTransaction(logger: logger) { connection in
            let store = OperatorStore(connection: connection, logger: logger)
            guard try await !store.run("SELECT 1 FROM push.apps WHERE id = \(appID) FOR SHARE").isEmpty else { return nil }
            guard !records.isEmpty else { return DeviceImportResult(inserted: 0, updated: 0) }
            try await store.run("""
                CREATE TEMPORARY TABLE pgpush_device_import (
                    line integer, token text, user_id text, tags text, platform text, locale text, web_p256dh text,
                    web_auth text, timezone text)
                ON COMMIT DROP
                """)
            try await connection.copyFrom(
                table: "pgpush_device_import",
                columns: ["line", "token", "user_id", "tags", "platform", "locale", "web_p256dh", "web_auth", "timezone"],
                logger: logger
            ) { writer in
                var chunk = ""
                for record in records {
                    // Tags travel as a JSON array: no array-literal quoting rules to get wrong.
                    let tags = String(decoding: try JSONSerialization.data(withJSONObject: record.tags), as: UTF8.self)
                    chunk += CopyText.row([
                        String(record.line), record.token, record.userID, tags, record.platform.rawValue, record.locale,
                        record.webP256dh, record.webAuth, record.timezone,
                    ])
                    if chunk.utf8.count >= Self.importBatchBytes {
                        try await writer.write(ByteBuffer(string: chunk))
                        chunk = ""
                    }
                }
                if !chunk.isEmpty { try await writer.write(ByteBuffer(string: chunk)) }
            }
            // push.devices has no check of its own on timezone: push.register_device checks it, and so does this.
            if let row = try await store.run("""
                SELECT line, timezone FROM pgpush_device_import
                 WHERE timezone IS NOT NULL AND NOT push.is_time_zone(timezone)
                 ORDER BY line LIMIT 1
                """).first {
                let (line, timezone) = try row.decode((Int32, String).self)
                throw UnknownTimeZone(line: Int(line), timezone: timezone)
            }
            let rows = try await store.run("""
                WITH upserted AS (
                    INSERT INTO push.devices AS d (app_id, token, user_id, tags, registered_at, platform, locale, web_p256dh,
                                                   web_auth, timezone)
                    SELECT DISTINCT ON (i.token) \(appID)::text, i.token, i.user_id,
                           ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)), now(), i.platform,
                           -- A malformed locale is kept as given, for devices_locale_form to refuse, not dropped.
                           coalesce(push.normalize_locale(i.locale), i.locale), i.web_p256dh, i.web_auth, i.timezone
                      FROM pgpush_device_import i
                     ORDER BY i.token, i.line DESC
                    ON CONFLICT (app_id, token) DO UPDATE
                       SET user_id = CASE WHEN \(replaceUserIDs) THEN EXCLUDED.user_id ELSE d.user_id END,
                           tags = CASE WHEN \(replaceTags) THEN EXCLUDED.tags ELSE d.tags END,
                           registered_at = EXCLUDED.registered_at, platform = EXCLUDED.platform,
                           -- A subscription's keys change when the browser subscribes again at the same endpoint.
                           web_p256dh = EXCLUDED.web_p256dh, web_auth = EXCLUDED.web_auth,
                           -- An import without a locale keeps the one the device has.
                           locale = coalesce(EXCLUDED.locale, d.locale),
                           -- Likewise its time zone.
                           timezone = coalesce(EXCLUDED.timezone, d.timezone)
                    RETURNING (xmax = 0) AS inserted
                )
                SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted) FROM upserted
                """)
            let (inserted, updated) = try rows[0].decode((Int64, Int64).self)
            return DeviceImportResult(inserted: inserted, updated: updated)
        }
    }
}

extension OperatorStore {
    /// Calls `push.set_badge`: sets the badge counter of one device (`token`) or of every device of a user
    /// (`userID`; give exactly one) to `value` (0 clears the badge) and returns how many devices it set. The
    /// database validates the arguments and names the field it rejects: an unknown app is foreign_key_violation
    /// (23503), an unknown token no_data_found (P0002).
    public func setBadge(appID: String, token: String?, userID: String?, value: Int32 = 0) async throws -> Int32 {
        let rows = try await run("""
            SELECT push.set_badge(
                app_id => \(appID)::text,
                token => \(token)::text,
                user_id => \(userID)::text,
                value => \(value)::integer)
            """)
        return try rows.first?.decode(Int32.self) ?? 0
    }
}

/// PostgreSQL COPY text format: `\N` is NULL; backslash, tab, line feed and carriage return are escaped.
enum CopyText {
    static func field(_ value: String?) -> String {
        guard let value else { return "\\N" }
        var escaped = ""
        escaped.reserveCapacity(value.utf8.count)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\\": escaped += "\\\\"
            case "\t": escaped += "\\t"
            case "\n": escaped += "\\n"
            case "\r": escaped += "\\r"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }

    static func row(_ values: [String?]) -> String {
        values.map(field).joined(separator: "\t") + "\n"
    }
}

/// One `push.register_device` call of `pgpush devices add`: a device token, or a browser's Web Push subscription.
public struct DeviceRegistration: Sendable, Hashable {
    public var appID: String
    /// `ios`, `android` or `web`.
    public var platform: String
    /// The device token; `nil` for a Web Push subscription, whose endpoint is its token.
    public var token: String?
    /// `PushSubscription.toJSON()`'s object as JSON text, for `web`; the database checks it.
    public var subscription: String?
    public var userID: String?
    public var tags: [String]
    /// A BCP 47 tag; `nil` keeps the locale the device has.
    public var locale: String?
    /// The device's previous token (or endpoint), deleted.
    public var replaces: String?
    /// An IANA time zone such as `Europe/Paris`; `nil` keeps the zone the device has.
    public var timezone: String?

    public init(
        appID: String, platform: String, token: String?, subscription: String?, userID: String?, tags: [String],
        locale: String?, replaces: String?, timezone: String? = nil
    ) {
        self.appID = appID
        self.platform = platform
        self.token = token
        self.subscription = subscription
        self.userID = userID
        self.tags = tags
        self.locale = locale
        self.replaces = replaces
        self.timezone = timezone
    }
}

extension OperatorStore {
    /// Calls `push.register_device` with every value bound; `subscription` is NULL (the function's default) for
    /// a device token. The database validates the arguments and names the one it refuses: an unknown app is
    /// foreign_key_violation (23503).
    public func registerDevice(_ device: DeviceRegistration) async throws {
        let d = device
        try await run("""
            SELECT push.register_device(
                app_id => \(d.appID)::text,
                token => \(d.token)::text,
                user_id => \(d.userID)::text,
                tags => \(d.tags)::text[],
                replaces => \(d.replaces)::text,
                platform => \(d.platform)::text,
                locale => \(d.locale)::text,
                subscription => \(d.subscription)::jsonb,
                timezone => \(d.timezone)::text)
            """)
    }
}
