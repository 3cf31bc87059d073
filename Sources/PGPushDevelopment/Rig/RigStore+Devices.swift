import Foundation
import PostgresNIO

/// Synthetic devices, each kind in one statement. Token prefixes keep the kinds apart: live iOS tokens are 64 hex
/// digits (`00…`), Android ones look like FCM's, dead ones start with `dead`, malformed ones with `bad0`, user
/// devices with `5a`, warm-up and latency devices with `fe`.
extension RigStore {
    /// Live iOS, live Android, dead (registered 30 days ago, so the simulator's 410 timestamp of yesterday prunes
    /// them) and malformed devices. With `iosAsActivityTokens` the live iOS ones are Live Activity update tokens,
    /// one activity (`act-<n>`) each. With `locales` (lowercase BCP 47 tags), every sixth live device has no
    /// locale and the others take the tags in turn, set in the insert itself; without, no device has one.
    public func registerDevices(
        appID: String, ios: Int, android: Int, dead: Int, bad: Int, iosAsActivityTokens: Bool = false, locales: [String] = []
    ) async throws {
        // With 7 tags (no factor in common with 6), each tag is as common as any other.
        try await run("""
            INSERT INTO push.devices (app_id, token, token_kind, activity_id, locale)
            SELECT \(appID), lpad(to_hex(g), 64, '0'), CASE WHEN \(iosAsActivityTokens) THEN 'activity' ELSE 'device' END,
                   CASE WHEN \(iosAsActivityTokens) THEN 'act-' || g END,
                   CASE WHEN g % 6 <> 0 THEN (\(locales)::text[])[g % nullif(cardinality(\(locales)::text[]), 0) + 1] END
              FROM generate_series(1, \(ios)) g
            """)
        // Android registration tokens look like FCM's: an instance id, a colon, and a long opaque part.
        try await run("""
            INSERT INTO push.devices (app_id, token, platform, locale)
            SELECT \(appID), 'fcm' || lpad(to_hex(g), 19, '0') || ':APA91b' || md5(g::text) || md5((g + 1)::text), 'android',
                   CASE WHEN g % 6 <> 0 THEN (\(locales)::text[])[g % nullif(cardinality(\(locales)::text[]), 0) + 1] END
              FROM generate_series(1, \(android)) g
            """)
        try await run("""
            INSERT INTO push.devices (app_id, token, registered_at)
            SELECT \(appID), 'dead' || lpad(to_hex(g), 60, '0'), now() - interval '30 days'
              FROM generate_series(1, \(dead)) g
            """)
        try await run("""
            INSERT INTO push.devices (app_id, token)
            SELECT \(appID), 'bad0' || lpad(to_hex(g), 60, '0') FROM generate_series(1, \(bad)) g
            """)
    }

    /// The app's devices, and how many of them have a badge counter of exactly `value`.
    public func badgeCounters(appID: String, at value: Int) async throws -> (devices: Int64, atValue: Int64) {
        let rows = try await run("""
            SELECT count(*), count(*) FILTER (WHERE badge = \(Int32(clamping: value))) FROM push.devices WHERE app_id = \(appID)
            """)
        guard let row = rows.first else { return (0, 0) }
        let (devices, atValue) = try row.decode((Int64, Int64).self)
        return (devices, atValue)
    }

    /// `ANALYZE push.devices`, so that the next job plans with the table's real size.
    public func analyzeDevices() async throws {
        try await run("ANALYZE push.devices")
    }

    /// `count` devices, each with its own user id `<userPrefix><n>` (n from 1).
    public func registerUserDevices(appID: String, count: Int, userPrefix: String) async throws {
        try await run("""
            INSERT INTO push.devices (app_id, token, user_id)
            SELECT \(appID), '5a' || lpad(to_hex(g), 62, '0'), \(userPrefix) || g FROM generate_series(1, \(count)) g
            """)
    }

    /// `count` live devices carrying `tags` and no user id.
    public func registerTaggedDevices(appID: String, count: Int, tags: [String]) async throws {
        try await run("""
            INSERT INTO push.devices (app_id, token, tags)
            SELECT \(appID), lpad(to_hex(g), 64, '0'), \(tags)::text[] FROM generate_series(1, \(count)) g
            """)
    }

    /// One device per user of `users`, its token marked with `round` so that repeated warm-ups never collide.
    public func registerWarmUpDevices(appID: String, round: String, users: [String]) async throws {
        try await run("""
            INSERT INTO push.devices (app_id, token, user_id)
            SELECT \(appID), 'fe' || \(round) || lpad(to_hex(g), 54, '0'), (\(users)::text[])[g]
              FROM generate_series(1, \(users.count)) g
            """)
    }

    /// One device with its own user id.
    public func registerDevice(appID: String, token: String, userID: String) async throws {
        try await run("INSERT INTO push.devices (app_id, token, user_id) VALUES (\(appID), \(token), \(userID))")
    }

    /// Removes every device of the app (the rig's clean-up on a caller's database).
    public func deleteDevices(appID: String) async throws {
        try await run("DELETE FROM push.devices WHERE app_id = \(appID)")
    }

    /// Gives the app an FCM credential.
    public func setFCMCredential(appID: String, projectID: String, serviceAccountPath: String) async throws {
        try await run("""
            UPDATE push.apps SET fcm_project_id = \(projectID), fcm_service_account_path = \(serviceAccountPath) WHERE id = \(appID)
            """)
    }

    /// How many of the worker ids have registered in `push.workers`.
    public func registeredWorkers(_ ids: [String]) async throws -> Int {
        Int(try await run("SELECT count(*) FROM push.workers WHERE id = ANY(\(ids))").first?.decode(Int64.self) ?? 0)
    }
}
