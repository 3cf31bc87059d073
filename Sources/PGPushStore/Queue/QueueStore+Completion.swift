import Foundation
import PostgresNIO

/// What writing a batch of completions did.
public struct CompletionReport: Sendable, Hashable {
    /// Chunks whose lease this process had lost: another process records them, so nothing of theirs was written.
    public var leaseLost: [Int64] = []
    /// Jobs that finished in this write.
    public var jobsFinished = 0
}

extension QueueStore {
    /// Records the completions of many chunks, of many jobs, in one transaction (group commit):
    /// - a chunk is deleted only if this process still holds it (`locked_by`), so a process that lost its lease
    ///   cannot record a chunk twice; a lost chunk's outcomes are dropped in the same statement;
    /// - final outcomes are appended to `push.deliveries` in bulk (unnest arrays, no per-token statements);
    /// - transient failures and unsent tokens go back as new 'tokens' chunks (not for an ended job);
    /// - dead tokens are queued for the pruner;
    /// - each job's counters move once, and a job finishes when its last chunk is gone.
    ///
    /// The job rows are locked in id order before anything reads them, which serialises the "last chunk?"
    /// check between processes without deadlocks, and makes a concurrent `push.cancel` (which locks the job
    /// first, then deletes the unclaimed chunks) see the retry chunks inserted here, or makes this write see
    /// the cancellation and insert none.
    public func complete(_ completions: [ChunkCompletion]) async throws -> CompletionReport {
        guard !completions.isEmpty else { return CompletionReport() }
        let batch = CompletionBatch(completions)
        return try await transaction { connection in
            var report = CompletionReport()
            let keptRows = try await self.run("""
                WITH kept AS (
                    DELETE FROM push.chunks WHERE id = ANY (\(batch.chunkIDs)) AND locked_by = \(self.leaseOwner)
                    RETURNING id, job_id, app_id, platform
                ), recorded AS (
                    INSERT INTO push.deliveries (job_id, app_id, token, status, reason, apns_id, attempt, sent_at, platform)
                    SELECT kept.job_id, kept.app_id, o.token, o.status, nullif(o.reason, ''), o.apns_id, o.attempt, o.sent_at, kept.platform
                      FROM unnest(\(batch.outcomeChunk)::int8[], \(batch.outcomeToken)::text[], \(batch.outcomeStatus)::int2[],
                                  \(batch.outcomeReason)::text[], \(batch.outcomeDeliveryID)::uuid[], \(batch.outcomeAttempt)::int2[],
                                  \(batch.outcomeSentAt)::timestamptz[])
                           AS o(chunk_id, token, status, reason, apns_id, attempt, sent_at)
                      JOIN kept ON kept.id = o.chunk_id
                )
                SELECT id FROM kept
                """, on: connection)
            let kept = Set(try keptRows.map { try $0.decode(Int64.self) })
            report.leaseLost = batch.chunkIDs.filter { !kept.contains($0) }
            let written = completions.filter { kept.contains($0.chunk.id) }
            guard !written.isEmpty else { return report }

            let jobIDs = Array(Set(written.map(\.chunk.jobID))).sorted()
            let stateRows = try await self.run(
                "SELECT id, state FROM push.jobs WHERE id = ANY (\(jobIDs)) ORDER BY id FOR UPDATE", on: connection)
            var activeJobs = Set<Int64>()
            for row in stateRows {
                let (id, state) = try row.decode((Int64, String).self)
                if state == "running" || state == "queued" { activeJobs.insert(id) }
            }

            let requeue = RequeueBatch(written.filter { activeJobs.contains($0.chunk.jobID) })
            if !requeue.tokens.isEmpty {
                try await self.run("""
                    INSERT INTO push.chunks (job_id, app_id, priority, seq, kind, tokens, attempt, last_reason,
                                             estimated_tokens, next_attempt_at, platform)
                    SELECT g.job_id, g.app_id, g.priority, g.seq, 'tokens', array_agg(t.token ORDER BY t.ord), g.attempt,
                           nullif(g.reason, ''), count(*)::int, g.not_before, g.platform
                      FROM unnest(\(requeue.groupOfToken)::int8[], \(requeue.tokens)::text[]) WITH ORDINALITY AS t(grp, token, ord)
                      JOIN unnest(\(requeue.job)::int8[], \(requeue.app)::text[], \(requeue.priority)::int4[], \(requeue.seq)::int4[],
                                  \(requeue.attempt)::int4[], \(requeue.reason)::text[], \(requeue.notBefore)::timestamptz[],
                                  \(requeue.platform)::text[])
                           WITH ORDINALITY AS g(job_id, app_id, priority, seq, attempt, reason, not_before, platform, grp)
                        ON g.grp = t.grp
                     GROUP BY g.grp, g.job_id, g.app_id, g.priority, g.seq, g.attempt, g.reason, g.not_before, g.platform
                    """, on: connection)
            }

            let prune = PruneBatch(written)
            if !prune.tokens.isEmpty {
                try await self.run("""
                    INSERT INTO push.prune_candidates (app_id, token, job_id, status, reason, apns_timestamp)
                    SELECT c.app_id, c.token, c.job_id, c.status, c.reason,
                           CASE WHEN c.ts_ms >= 0 THEN to_timestamp(c.ts_ms / 1000.0) END
                      FROM unnest(\(prune.app)::text[], \(prune.tokens)::text[], \(prune.job)::int8[], \(prune.status)::int2[],
                                  \(prune.reason)::text[], \(prune.timestampMilliseconds)::int8[])
                           AS c(app_id, token, job_id, status, reason, ts_ms)
                    """, on: connection)
            }

            // The app's answers for the wrong-environment valve, in the same transaction as the reports it judges.
            // Apps in a fixed order, so two workers' writes never wait on each other's rows in a cycle.
            let window = AppAnswerTally(written)
            if !window.app.isEmpty {
                try await self.run("""
                    INSERT INTO push.app_answer_window AS w (app_id, minute, answered, bad_device_tokens)
                    SELECT t.app_id, date_trunc('minute', now()), t.answered, t.bad
                      FROM unnest(\(window.app)::text[], \(window.answered)::int8[], \(window.bad)::int8[]) AS t(app_id, answered, bad)
                    ON CONFLICT (app_id, minute) DO UPDATE
                       SET answered = w.answered + EXCLUDED.answered, bad_device_tokens = w.bad_device_tokens + EXCLUDED.bad_device_tokens
                    """, on: connection)
            }

            // One update per job and write: counters, and the finish once no chunk is left. The job rows are
            // locked above, so of two processes finishing a job's last two chunks, the second sees both gone.
            // The jobs that still have chunks are looked up once per write, not probed per job: after
            // push.chunks was analyzed while it held one broadcast's chunks, the planner took every chunk for
            // that job's, the probe became a sequential scan of the queue per job, and writes of a few hundred
            // jobs took up to 3 s. MATERIALIZED: referenced once, the lookup would be inlined and run per job again.
            //
            // The total moves too, so that it ends as the sum of the outcomes: by what a key range held when it was
            // read beside what expansion counted there, and, for a cancelled job, by the tokens it will never send.
            let tally = JobTally(written, activeJobs: activeJobs)
            let finished = try await self.run("""
                WITH unfinished AS MATERIALIZED (
                    SELECT DISTINCT c.job_id FROM push.chunks c WHERE c.job_id = ANY (\(tally.job)::int8[])
                ), d AS (
                    SELECT t.*, t.job_id NOT IN (SELECT job_id FROM unfinished) AS drained
                      FROM unnest(\(tally.job)::int8[], \(tally.delivered)::int8[], \(tally.failed)::int8[], \(tally.expired)::int8[],
                                  \(tally.answered)::int8[], \(tally.bad)::int8[], \(tally.firstSent)::timestamptz[],
                                  \(tally.androidDelivered)::int8[], \(tally.androidFailed)::int8[],
                                  \(tally.totalChange)::int8[], \(tally.androidTotalChange)::int8[], \(tally.removed)::int8[],
                                  \(tally.added)::int8[], \(tally.cancelled)::int8[], \(tally.webDelivered)::int8[],
                                  \(tally.webFailed)::int8[], \(tally.webTotalChange)::int8[], \(tally.capped)::int8[])
                           AS t(job_id, delivered, failed, expired, answered, bad, first_sent, android_delivered, android_failed,
                                total_change, android_total_change, removed, added, cancelled, web_delivered, web_failed,
                                web_total_change, capped)
                )
                UPDATE push.jobs j
                   SET delivered = j.delivered + d.delivered, failed = j.failed + d.failed, expired = j.expired + d.expired,
                       total = j.total + d.total_change, android_total = j.android_total + d.android_total_change,
                       removed_before_send = j.removed_before_send + d.removed,
                       added_before_send = j.added_before_send + d.added,
                       cancelled_tokens = j.cancelled_tokens + d.cancelled,
                       answered = j.answered + d.answered, bad_device_tokens = j.bad_device_tokens + d.bad,
                       android_delivered = j.android_delivered + d.android_delivered,
                       android_failed = j.android_failed + d.android_failed,
                       web_total = j.web_total + d.web_total_change,
                       web_delivered = j.web_delivered + d.web_delivered, web_failed = j.web_failed + d.web_failed,
                       capped = j.capped + d.capped,
                       first_sent_at = least(j.first_sent_at, nullif(d.first_sent, 'epoch'::timestamptz)),
                       state = CASE WHEN j.state = 'running' AND d.drained
                                    THEN \(unescaped: JobFinalState.sql(
                                        failureReason: "j.failure_reason", delivered: "j.delivered + d.delivered",
                                        failed: "j.failed + d.failed", expired: "j.expired + d.expired"))
                                    ELSE j.state END,
                       finished_at = CASE WHEN j.state = 'running' AND d.drained THEN now() ELSE j.finished_at END
                  FROM d
                 WHERE j.id = d.job_id
                RETURNING j.state IN ('done', 'failed') AND j.finished_at = now()
                """, on: connection)
            report.jobsFinished = try finished.count { try $0.decode(Bool.self) }
            return report
        }
    }

    /// Records one chunk's completion; throws ``LeaseLost`` when this process no longer holds it.
    public func complete(_ completion: ChunkCompletion) async throws {
        let report = try await complete([completion])
        if let lost = report.leaseLost.first { throw LeaseLost(chunkID: lost) }
    }
}

/// The job's final-state rule, the one place it is written: how a running job ends once none of its chunks is
/// left. The completion path (``QueueStore/complete(_:)``, as it writes a job's last chunk) and maintenance
/// (``QueueStore/finishDrainedJobs()``, the backstop for a write that never came) both build it from here.
///
/// - `failed`: the job was failed as a whole (`failure_reason`: a job-level error, ``QueueStore/failJob(_:reason:)``),
///   or nothing was delivered and something failed or expired;
/// - `done`: everything else: some token delivered, or no outcome at all (every device was removed before it
///   was sent; an empty audience ends `done` at expansion).
///
/// The counts are a job's `delivered`, `failed` and `expired` (tokens whose notification expired before it was
/// sent: a job-level expiry ends the job through its counts, `failed` if nothing got through). A job is
/// `cancelled` only by `push.cancel`, never by its counts, and a cancelled job is never `running`, so the rule
/// never meets one.
enum JobFinalState {
    /// The rule as a SQL expression giving `'done'` or `'failed'`, over the SQL expressions of a job's
    /// `failure_reason` and counts (each parenthesised here, so any expression may be passed).
    static func sql(failureReason: String, delivered: String, failed: String, expired: String) -> String {
        "CASE WHEN (\(failureReason)) IS NOT NULL OR ((\(delivered)) = 0 AND (\(failed)) + (\(expired)) > 0) THEN 'failed' ELSE 'done' END"
    }

    /// The rule over a `push.jobs` row's own columns, for the row named `alias`.
    static func sql(ofJob alias: String) -> String {
        sql(failureReason: "\(alias).failure_reason", delivered: "\(alias).delivered", failed: "\(alias).failed",
            expired: "\(alias).expired")
    }
}

/// A batch's outcomes as the parallel arrays `unnest` takes (``ArrayColumn``), encoded in one pass over the
/// completions. A row's job and app are its chunk's, read back from the chunk row the write deletes.
private struct CompletionBatch {
    var chunkIDs: [Int64] = []
    var outcomeChunk: ArrayColumn<Int64>
    var outcomeToken: ArrayColumn<String>
    var outcomeStatus: ArrayColumn<Int16>
    var outcomeReason: ArrayColumn<String>
    var outcomeDeliveryID: ArrayColumn<UUID>
    var outcomeAttempt: ArrayColumn<Int16>
    var outcomeSentAt: ArrayColumn<Date>

    init(_ completions: [ChunkCompletion]) {
        let count = completions.reduce(0) { $0 + $1.outcomes.count }
        outcomeChunk = ArrayColumn(reservingBytes: count * 12)
        outcomeToken = ArrayColumn(reservingBytes: count * 72)
        outcomeStatus = ArrayColumn(reservingBytes: count * 6)
        outcomeReason = ArrayColumn(reservingBytes: count * 4)
        outcomeDeliveryID = ArrayColumn(reservingBytes: count * 20)
        outcomeAttempt = ArrayColumn(reservingBytes: count * 6)
        outcomeSentAt = ArrayColumn(reservingBytes: count * 12)
        chunkIDs.reserveCapacity(completions.count)
        for completion in completions {
            chunkIDs.append(completion.chunk.id)
            for outcome in completion.outcomes {
                outcomeChunk.append(completion.chunk.id)
                outcomeToken.append(outcome.token)
                outcomeStatus.append(Int16(clamping: outcome.status))
                outcomeReason.append(outcome.reason ?? "")
                outcomeDeliveryID.append(outcome.deliveryID)
                outcomeAttempt.append(Int16(clamping: outcome.attempt))
                outcomeSentAt.append(outcome.sentAt)
            }
        }
    }
}

/// Answers and BadDeviceToken answers per app, apps sorted.
private struct AppAnswerTally {
    var app: [String] = []
    var answered: [Int64] = []
    var bad: [Int64] = []

    init(_ completions: [ChunkCompletion]) {
        var totals: [String: (Int64, Int64)] = [:]
        for completion in completions where completion.answered > 0 {
            totals[completion.chunk.appID, default: (0, 0)].0 += Int64(completion.answered)
            totals[completion.chunk.appID, default: (0, 0)].1 += Int64(completion.badDeviceTokens)
        }
        for key in totals.keys.sorted() {
            app.append(key)
            answered.append(totals[key]!.0)
            bad.append(totals[key]!.1)
        }
    }
}

/// Requeued token lists flattened: one row per group (a new chunk) and one per token, tied by group number
/// (1-based, as `WITH ORDINALITY` counts).
private struct RequeueBatch {
    var groupOfToken: [Int64] = []
    var tokens: [String] = []
    var job: [Int64] = []
    var app: [String] = []
    var priority: [Int32] = []
    var seq: [Int32] = []
    var attempt: [Int32] = []
    var reason: [String] = []
    var notBefore: [Date] = []
    var platform: [String] = []

    init(_ completions: [ChunkCompletion]) {
        for completion in completions {
            let chunk = completion.chunk
            for batch in completion.requeued where !batch.tokens.isEmpty {
                job.append(chunk.jobID)
                app.append(chunk.appID)
                priority.append(Int32(clamping: chunk.priority))
                seq.append(Int32(clamping: chunk.seq))
                attempt.append(Int32(clamping: batch.attempt))
                reason.append(batch.lastReason ?? "")
                notBefore.append(batch.notBefore)
                platform.append(chunk.platform.rawValue)
                let group = Int64(job.count)
                for token in batch.tokens {
                    groupOfToken.append(group)
                    tokens.append(token)
                }
            }
        }
    }
}

private struct PruneBatch {
    var app: [String] = []
    var tokens: [String] = []
    var job: [Int64] = []
    var status: [Int16] = []
    var reason: [String] = []
    var timestampMilliseconds: [Int64] = []

    init(_ completions: [ChunkCompletion]) {
        for completion in completions {
            for candidate in completion.pruneCandidates {
                app.append(completion.chunk.appID)
                tokens.append(candidate.token)
                job.append(completion.chunk.jobID)
                status.append(Int16(clamping: candidate.status))
                reason.append(candidate.reason)
                timestampMilliseconds.append(candidate.apnsTimestamp.map { Int64($0.timeIntervalSince1970 * 1000) } ?? -1)
            }
        }
    }
}

/// Each job's counter deltas in one write. Nothing sent is the epoch, which the statement turns into NULL
/// (array elements cannot be NULL when bound); `least` ignores NULLs.
private struct JobTally {
    var job: [Int64] = []
    var delivered: [Int64] = []
    var failed: [Int64] = []
    var expired: [Int64] = []
    var answered: [Int64] = []
    var bad: [Int64] = []
    var firstSent: [Date] = []
    /// Android's part of `delivered`, and of `failed` and `expired` together.
    var androidDelivered: [Int64] = []
    var androidFailed: [Int64] = []
    /// How the job's total (and Android's part of it) moves: a key range read beside its estimate, minus what
    /// a cancelled job will not send.
    var totalChange: [Int64] = []
    var androidTotalChange: [Int64] = []
    /// The web platform's part of the same three.
    var webDelivered: [Int64] = []
    var webFailed: [Int64] = []
    var webTotalChange: [Int64] = []
    /// Devices counted at expansion but not found when their key range was read, and the reverse.
    var removed: [Int64] = []
    var added: [Int64] = []
    /// Tokens counted in the total that a cancelled job will never send.
    var cancelled: [Int64] = []
    /// Tokens not sent because their person reached the job's category cap: neither delivered nor failed.
    var capped: [Int64] = []
    static let nothingSent = Date(timeIntervalSince1970: 0)

    init(_ completions: [ChunkCompletion], activeJobs: Set<Int64>) {
        var index: [Int64: Int] = [:]
        for completion in completions {
            let id = completion.chunk.jobID
            let slot: Int
            if let existing = index[id] {
                slot = existing
            } else {
                slot = job.count
                index[id] = slot
                job.append(id)
                delivered.append(0); failed.append(0); expired.append(0); answered.append(0); bad.append(0)
                androidDelivered.append(0); androidFailed.append(0)
                webDelivered.append(0); webFailed.append(0); webTotalChange.append(0)
                totalChange.append(0); androidTotalChange.append(0); removed.append(0); added.append(0); cancelled.append(0)
                capped.append(0)
                firstSent.append(Self.nothingSent)
            }
            let android: Int64 = completion.chunk.platform == .android ? 1 : 0
            let web: Int64 = completion.chunk.platform == .web ? 1 : 0
            // The tokens this chunk stands for now: a 'tokens' chunk's own list (counted in full at expansion or
            // requeue), a range's devices as read (its estimate if it was not read).
            let estimated = Int64(completion.chunk.estimatedTokens)
            var inHand = estimated
            if completion.chunk.kind == .range, let read = completion.readTokens {
                inHand = Int64(read)
                let change = inHand - estimated
                if change < 0 { removed[slot] -= change } else { added[slot] += change }
                totalChange[slot] += change
                androidTotalChange[slot] += change * android
                webTotalChange[slot] += change * web
            }
            // An active job requeues what it did not finish; a cancelled one drops it, and counts it as not sent.
            if !activeJobs.contains(id) {
                let dropped = max(0, inHand - Int64(completion.outcomes.count))
                cancelled[slot] += dropped
                totalChange[slot] -= dropped
                androidTotalChange[slot] -= dropped * android
                webTotalChange[slot] -= dropped * web
            }
            for outcome in completion.outcomes {
                if outcome.status == 200 {
                    delivered[slot] += 1
                    androidDelivered[slot] += android
                    webDelivered[slot] += web
                } else if outcome.status == 0 && outcome.reason == ChunkCompletion.frequencyCappedReason {
                    capped[slot] += 1
                } else if outcome.status == 0 && outcome.reason == ChunkCompletion.expiredReason {
                    expired[slot] += 1
                    androidFailed[slot] += android
                    webFailed[slot] += web
                } else {
                    failed[slot] += 1
                    androidFailed[slot] += android
                    webFailed[slot] += web
                }
                if outcome.status != 0 {
                    firstSent[slot] = firstSent[slot] == Self.nothingSent ? outcome.sentAt : min(firstSent[slot], outcome.sentAt)
                }
            }
            answered[slot] += Int64(completion.answered)
            bad[slot] += Int64(completion.badDeviceTokens)
        }
    }
}
