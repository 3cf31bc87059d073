import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// What each device of a chunk gets, for a job with per-device content (``JobDetails/isPersonal``): its
    /// locale, and for a job that increments badges, the number to send. A token that is not a registered
    /// device (an explicit token list may name one) has no entry.
    ///
    /// The counter moves once per (job, device). The statement locks the devices in token order (two jobs'
    /// chunks over the same devices wait for each other instead of deadlocking), records each step in
    /// `push.badge_steps` under its (job, token) key, and moves the counter only for steps it recorded. A retry
    /// of a token, or a chunk re-sent after its worker crashed, finds its step and sends the same number again.
    /// Should two holders of one chunk race (a lease lost while its sends were still out), the second waits on the
    /// first's row locks and then sees its step, so it moves nothing either.
    public func deviceContents(of chunk: ClaimedChunk, tokens: [String]) async throws -> [String: DeviceContent] {
        guard !tokens.isEmpty else { return [:] }
        let rows: [PostgresRow]
        if chunk.job.incrementsBadge {
            rows = try await run("""
                WITH wanted AS (
                    SELECT DISTINCT t.token FROM unnest(\(tokens)::text[]) AS t(token)
                ), locked AS (
                    SELECT d.token, d.locale, d.badge FROM push.devices d JOIN wanted w ON w.token = d.token
                     WHERE d.app_id = \(chunk.appID)
                     ORDER BY d.token
                       FOR NO KEY UPDATE OF d
                ), recorded AS (
                    INSERT INTO push.badge_steps (job_id, token, badge)
                    SELECT \(chunk.jobID), l.token, l.badge + 1 FROM locked l ORDER BY l.token
                    ON CONFLICT (job_id, token) DO NOTHING
                    RETURNING token, badge
                ), moved AS (
                    UPDATE push.devices d SET badge = r.badge
                      FROM recorded r
                     WHERE d.app_id = \(chunk.appID) AND d.token = r.token
                )
                -- A step recorded by an earlier attempt is in the snapshot; one a racing holder committed while
                -- this statement waited for its locks is not, but the counter it moved is (the locked row is
                -- read anew after the wait).
                SELECT l.token, l.locale, coalesce(r.badge, s.badge, l.badge)
                  FROM locked l
                  LEFT JOIN recorded r ON r.token = l.token
                  LEFT JOIN push.badge_steps s ON s.job_id = \(chunk.jobID) AND s.token = l.token
                """)
        } else {
            rows = try await run("""
                SELECT d.token, d.locale, NULL::int4 FROM push.devices d
                 WHERE d.app_id = \(chunk.appID) AND d.token = ANY (\(tokens)::text[])
                """)
        }
        var contents: [String: DeviceContent] = [:]
        contents.reserveCapacity(rows.count)
        for row in rows {
            let (token, locale, badge) = try row.decode((String, String?, Int32?).self)
            contents[token] = DeviceContent(locale: locale, badge: badge.map(Int.init))
        }
        return contents
    }

    /// Removes the badge steps of ended jobs, a batch at a time; returns how many it removed.
    public func removeBadgeSteps(batchSize: Int = 5000) async throws -> Int {
        let rows = try await run("SELECT push.remove_badge_steps(\(Int32(clamping: batchSize)))")
        return Int(try rows.first?.decode(Int32.self) ?? 0)
    }
}
