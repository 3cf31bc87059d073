import Foundation
import PostgresNIO

/// Web Push for the rig: the app's VAPID key, subscriptions registered in bulk, and a job's figures per platform.
extension RigStore {
    /// Gives the app its VAPID key (the PEM file the workers read, its public half, and the `sub` claim).
    public func setVAPIDKey(appID: String, privateKeyPath: String, publicKey: String, subject: String) async throws {
        try await run("""
            UPDATE push.apps SET vapid_private_key_path = \(privateKeyPath), vapid_public_key = \(publicKey),
                   vapid_subject = \(subject)
             WHERE id = \(appID)
            """)
    }

    /// Registers subscriptions as a backend does, through `push.register_device(…, platform => 'web',
    /// subscription => …)`, in one statement: each element is a browser's `subscription.toJSON()`. Every check
    /// of the producer API runs (about half a millisecond of the database's time per subscription).
    public func registerWebSubscriptions(appID: String, subscriptionJSON: [String]) async throws {
        guard !subscriptionJSON.isEmpty else { return }
        try await run("""
            SELECT count(push.register_device(app_id => \(appID), platform => 'web', subscription => s::jsonb))
              FROM unnest(\(subscriptionJSON)::text[]) s
            """)
    }

    /// Inserts web subscriptions straight into `push.devices` in one statement: endpoint, p256dh and auth
    /// (base64url, as `push.register_device` stores them) at the same index. The rig's fast path for large
    /// counts: the table's own checks (https endpoint, both keys present) still apply, the API's do not.
    public func insertWebSubscriptions(appID: String, endpoints: [String], p256dh: [String], auth: [String]) async throws {
        precondition(endpoints.count == p256dh.count && endpoints.count == auth.count, "one p256dh and auth per endpoint")
        guard !endpoints.isEmpty else { return }
        try await run("""
            INSERT INTO push.devices (app_id, token, platform, web_p256dh, web_auth)
            SELECT \(appID), e, 'web', p, a FROM unnest(\(endpoints)::text[], \(p256dh)::text[], \(auth)::text[]) AS s(e, p, a)
            """)
    }

    /// `count` subscriptions on `origin` (`https://host:port`) made in the database in one statement, for a
    /// stand-in that reads no message (nginx): endpoints `<origin>/push/<n>-<md5>`, each with one of `keys`
    /// (p256dh, auth) in turn. The workers encrypt for each as for any subscription; nothing can decrypt.
    public func insertSyntheticWebSubscriptions(
        appID: String, origin: String, count: Int, keys: [(p256dh: String, auth: String)]
    ) async throws {
        guard count > 0, !keys.isEmpty else { return }
        try await run("""
            INSERT INTO push.devices (app_id, token, platform, web_p256dh, web_auth)
            SELECT \(appID), \(origin) || '/push/' || g || '-' || md5(g::text), 'web',
                   (\(keys.map(\.p256dh))::text[])[g % \(keys.count) + 1], (\(keys.map(\.auth))::text[])[g % \(keys.count) + 1]
              FROM generate_series(1, \(count)) g
            """)
    }

    /// A job's audience and outcomes per platform (`push.job_progress`); iOS is the rest of the job's total.
    public func platformProgress(_ job: Int64) async throws -> [PlatformProgress] {
        let rows = try await run("""
            SELECT ios_total, ios_delivered, ios_failed, android_total, android_delivered, android_failed,
                   web_total, web_delivered, web_failed
              FROM push.job_progress WHERE job_id = \(job)
            """)
        guard let row = rows.first else { return [] }
        let v = try row.decode((Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?, Int64?).self)
        return [
            PlatformProgress(platform: "ios", total: v.0 ?? 0, delivered: v.1 ?? 0, failed: v.2 ?? 0),
            PlatformProgress(platform: "android", total: v.3 ?? 0, delivered: v.4 ?? 0, failed: v.5 ?? 0),
            PlatformProgress(platform: "web", total: v.6 ?? 0, delivered: v.7 ?? 0, failed: v.8 ?? 0),
        ]
    }

    /// The job's web outcomes and the seconds from its first claim (`started_at`) to the last web outcome's
    /// `sent_at`: the time its web messages took, when other platforms finish earlier or later.
    public func webSendSpan(_ job: Int64) async throws -> (messages: Int64, seconds: Double?) {
        let rows = try await run("""
            SELECT count(d.token), extract(epoch FROM max(d.sent_at) - j.started_at)::float8
              FROM push.jobs j LEFT JOIN push.deliveries d ON d.job_id = j.id AND d.platform = 'web'
             WHERE j.id = \(job) GROUP BY j.started_at
            """)
        guard let row = rows.first else { return (0, nil) }
        let (messages, seconds) = try row.decode((Int64, Double?).self)
        return (messages, seconds)
    }
}

/// One platform's part of a job.
public struct PlatformProgress: Sendable, Equatable {
    public var platform: String
    public var total: Int64
    public var delivered: Int64
    public var failed: Int64

    public init(platform: String, total: Int64, delivered: Int64, failed: Int64) {
        (self.platform, self.total, self.delivered, self.failed) = (platform, total, delivered, failed)
    }
}
