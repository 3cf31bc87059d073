-- The worker looks for a broadcast to expand every 100 ms. It read the due-jobs index from the top and skipped
-- every small job in it, so a burst of 20,000 queued one-user jobs made each look read them all (about 14 ms,
-- a tenth of the burst's expansion time; BENCHMARKS.md). Jobs of one token, user or activity are small at any
-- chunk size, so this index leaves them out and the look reads only what may be a broadcast. Inserting a
-- one-token job adds nothing to it.
CREATE INDEX jobs_due_beyond_one ON push.jobs (priority DESC, send_at, id)
    WHERE state = 'queued' AND channel_id IS NULL
      AND NOT coalesce(cardinality(tokens) = 1 OR cardinality(user_ids) = 1 OR cardinality(activity_ids) = 1, false);
