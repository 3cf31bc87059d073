import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// Takes a slot of the job's category cap for each person among `tokens`, and returns the tokens whose person
    /// has none left: they are recorded as ``ChunkCompletion/frequencyCappedReason``, not sent.
    ///
    /// A person is the device's `user_id`, or the device alone when it has none (or is not registered). A job
    /// counts once per person: a person already holding a slot for this job (another device, a retried chunk)
    /// keeps it. The ledger row of a person is locked by the upsert, so of two workers sending two jobs to the
    /// same person at once, the second sees the first's slot: the cap is exact across a fleet. People are taken
    /// in one order, so two chunks never wait on each other's rows in a cycle. Slots older than the window are
    /// dropped from the row as it is written.
    public func takeFrequencySlots(
        appID: String, jobID: Int64, category: String, cap: FrequencyCap, tokens: [String]
    ) async throws -> [String] {
        guard !tokens.isEmpty else { return [] }
        let windowSeconds = cap.window.inSeconds
        let rows = try await run("""
            WITH people AS MATERIALIZED (
                SELECT t.token, coalesce('user:' || d.user_id, 'device:' || t.token) AS person
                  FROM unnest(\(tokens)::text[]) AS t(token)
                  LEFT JOIN push.devices d ON d.app_id = \(appID) AND d.token = t.token
            ), slotted AS (
                INSERT INTO push.frequency_ledger AS f (app_id, category, person, job_ids, sent_at)
                SELECT \(appID), \(category), p.person, ARRAY[\(jobID)::int8], ARRAY[now()]
                  FROM (SELECT DISTINCT person FROM people) p
                 ORDER BY p.person
                ON CONFLICT (app_id, category, person) DO UPDATE
                   SET job_ids = CASE WHEN \(jobID) = ANY (f.job_ids) THEN f.job_ids ELSE
                           ARRAY(SELECT k.job FROM unnest(f.job_ids, f.sent_at) AS k(job, at)
                                  WHERE k.at > now() - make_interval(secs => \(windowSeconds)) ORDER BY k.at) || \(jobID)::int8 END,
                       sent_at = CASE WHEN \(jobID) = ANY (f.job_ids) THEN f.sent_at ELSE
                           ARRAY(SELECT k.at FROM unnest(f.sent_at) AS k(at)
                                  WHERE k.at > now() - make_interval(secs => \(windowSeconds)) ORDER BY k.at) || now() END
                 WHERE \(jobID) = ANY (f.job_ids)
                    OR (SELECT count(*) FROM unnest(f.sent_at) AS k(at)
                         WHERE k.at > now() - make_interval(secs => \(windowSeconds))) < \(cap.maximumJobs)
                RETURNING f.person
            )
            SELECT p.token FROM people p WHERE p.person NOT IN (SELECT s.person FROM slotted s)
            """)
        return try rows.map { try $0.decode(String.self) }
    }

    /// Forgets the frequency slots no cap can still count: rows whose every slot is older than the longest
    /// window any app allows (366 days), or whose app no longer caps their category. Returns the rows removed.
    public func forgetExpiredFrequencySlots(limit: Int = 10_000) async throws -> Int {
        let rows = try await run("""
            DELETE FROM push.frequency_ledger f
             WHERE (f.app_id, f.category, f.person) IN (
                   SELECT l.app_id, l.category, l.person FROM push.frequency_ledger l
                     JOIN push.apps a ON a.id = l.app_id
                    WHERE NOT coalesce(a.frequency_caps ? l.category, false)
                       OR l.sent_at[cardinality(l.sent_at)] < now()
                          - (a.frequency_caps -> l.category ->> 'per')::interval
                    LIMIT \(limit))
            RETURNING 1
            """)
        return rows.count
    }
}
