import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// What each device of a chunk gets, for a job with per-device content (``JobDetails/isPersonal``): its
    /// locale, and for a job that increments badges, the number to send. A token that is not a registered
    /// device (an explicit token list may name one) has no entry.
    ///
    /// The counter moves once per (job, device). The statement first records each step in `push.badge_steps`
    /// under its (job, token) key, then moves the counters of the steps it recorded, and only those: the key
    /// decides, so two holders of one chunk racing (a lease lost while its sends were still out) cannot both
    /// move a counter, and a retry of a token, or a chunk re-sent after its worker crashed, finds its step and
    /// sends the number it recorded. The number sent on a first step is the counter as moved (read from the
    /// locked row); the one recorded for a retry is read before the lock, so it can be one behind only when two
    /// jobs step the same device at the same moment.
    public func deviceContents(of chunk: ClaimedChunk, tokens: [String]) async throws -> [String: DeviceContent] {
        guard !tokens.isEmpty else { return [:] }
        let rows: [PostgresRow]
        if chunk.job.incrementsBadge {
            rows = try await run("""
                WITH wanted AS (
                    SELECT DISTINCT t.token FROM unnest(\(tokens)::text[]) AS t(token)
                ), recorded AS (
                    INSERT INTO push.badge_steps (job_id, token, badge)
                    SELECT \(chunk.jobID), d.token, d.badge + 1
                      FROM wanted w CROSS JOIN LATERAL (
                               SELECT d.token, d.badge FROM push.devices d
                                WHERE d.app_id = \(chunk.appID) AND d.token = w.token OFFSET 0) d
                     ORDER BY d.token
                    ON CONFLICT (job_id, token) DO NOTHING
                    RETURNING token
                ), moved AS (
                    UPDATE push.devices d SET badge = d.badge + 1
                      FROM recorded r
                     WHERE d.app_id = \(chunk.appID) AND d.token = r.token
                    RETURNING d.token, d.locale, d.badge
                )
                SELECT m.token, m.locale, m.badge FROM moved m
                UNION ALL
                -- Steps of earlier attempts (this statement's own are not in its snapshot). One probe per token:
                -- as a join, the planner may read every device of the app.
                SELECT x.token, x.locale, x.badge
                  FROM wanted w CROSS JOIN LATERAL (
                           SELECT d.token, d.locale, s.badge
                             FROM push.badge_steps s JOIN push.devices d ON d.app_id = \(chunk.appID) AND d.token = s.token
                            WHERE s.job_id = \(chunk.jobID) AND s.token = w.token OFFSET 0) x
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

    /// A chunk's tokens with what each device gets, for a job with per-device content that is to be sent: the
    /// read of the chunk's devices (``tokens(of:)``) and ``deviceContents(of:tokens:)`` in one statement. A
    /// 'range' chunk reads each device's locale and counter with its token, so its devices are probed once,
    /// not three times, and a first attempt looks up no earlier step. A token list takes the separate read.
    public func personalTokens(of chunk: ClaimedChunk) async throws -> PersonalTokens {
        guard chunk.kind == .range else {
            let contents = try await deviceContents(of: chunk, tokens: chunk.tokens)
            return PersonalTokens(tokens: chunk.tokens, contents: chunk.tokens.map { contents[$0] })
        }
        let rows: [PostgresRow]
        if chunk.job.incrementsBadge {
            // As in deviceContents(of:tokens:): the (job, token) key of the step decides who moves a counter.
            // A token whose step an earlier attempt recorded is not moved; its recorded number is looked up
            // (only then: coalesce evaluates the probe for those tokens alone).
            rows = try await run("""
                WITH audience AS MATERIALIZED (
                    SELECT d.token, d.locale, d.badge FROM push.devices d
                     WHERE \(audienceOf: chunk)
                     ORDER BY d.token
                ), recorded AS (
                    INSERT INTO push.badge_steps (job_id, token, badge)
                    SELECT \(chunk.jobID), a.token, a.badge + 1 FROM audience a ORDER BY a.token
                    ON CONFLICT (job_id, token) DO NOTHING
                    RETURNING token
                ), moved AS (
                    UPDATE push.devices d SET badge = d.badge + 1
                     WHERE d.app_id = \(chunk.appID) AND d.token = ANY (ARRAY(SELECT r.token FROM recorded r))
                    RETURNING d.token, d.badge
                )
                SELECT a.token, a.locale,
                       coalesce(m.badge, (SELECT s.badge FROM push.badge_steps s
                                           WHERE s.job_id = \(chunk.jobID) AND s.token = a.token))
                  FROM audience a LEFT JOIN moved m ON m.token = a.token
                 ORDER BY a.token
                """)
        } else {
            rows = try await run("""
                SELECT d.token, d.locale, NULL::int4 FROM push.devices d
                 WHERE \(audienceOf: chunk)
                 ORDER BY d.token
                """)
        }
        var tokens: [String] = []
        var contents: [DeviceContent?] = []
        tokens.reserveCapacity(rows.count)
        contents.reserveCapacity(rows.count)
        for row in rows {
            let (token, locale, badge) = try row.decode((String, String?, Int32?).self)
            tokens.append(token)
            contents.append(DeviceContent(locale: locale, badge: badge.map(Int.init)))
        }
        return PersonalTokens(tokens: tokens, contents: contents)
    }

    /// Removes the badge steps of ended jobs, a batch at a time; returns how many it removed.
    public func removeBadgeSteps(batchSize: Int = 5000) async throws -> Int {
        let rows = try await run("SELECT push.remove_badge_steps(\(Int32(clamping: batchSize)))")
        return Int(try rows.first?.decode(Int32.self) ?? 0)
    }
}
