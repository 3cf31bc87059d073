-- push.job_progress shows each platform's part of a job, so a mixed broadcast's Android half can be followed
-- apart from its iOS half. The worker keeps Android's counters beside the job's own (set at expansion,
-- added to in the completion's one update per job); iOS's are the rest. Producers cannot write them.

ALTER TABLE push.jobs
    ADD COLUMN android_total int8,
    ADD COLUMN android_delivered int8 NOT NULL DEFAULT 0,
    ADD COLUMN android_failed int8 NOT NULL DEFAULT 0;

GRANT UPDATE (android_total, android_delivered, android_failed) ON push.jobs TO pgpush_worker;

-- The columns of 0008, then one set per platform: total, delivered, failed (expired included, as in
-- `failed`) and pending. Before expansion the totals are counted from the audience, as `total` is; a job
-- expanded before this migration has no per-platform figures (NULL).
CREATE OR REPLACE VIEW push.job_progress WITH (security_barrier = true) AS
SELECT j.id AS job_id,
       j.app_id,
       j.state,
       t.total,
       j.delivered,
       j.failed + j.expired AS failed,
       j.pruned,
       CASE WHEN j.state IN ('queued', 'running')
            THEN greatest(t.total - j.delivered - j.failed - j.expired, 0) ELSE 0 END AS pending,
       j.created_at,
       j.started_at,
       j.finished_at,
       j.expired,
       j.priority,
       j.send_at,
       j.first_sent_at,
       j.failure_reason,
       t.total - t.android_total AS ios_total,
       j.delivered - j.android_delivered + p.unknown AS ios_delivered,
       j.failed + j.expired - j.android_failed + p.unknown AS ios_failed,
       CASE WHEN j.state IN ('queued', 'running')
            THEN greatest(t.total - t.android_total - (j.delivered - j.android_delivered)
                          - (j.failed + j.expired - j.android_failed), 0) ELSE 0 END + p.unknown AS ios_pending,
       t.android_total,
       j.android_delivered + p.unknown AS android_delivered,
       j.android_failed + p.unknown AS android_failed,
       CASE WHEN j.state IN ('queued', 'running')
            THEN greatest(t.android_total - j.android_delivered - j.android_failed, 0) ELSE 0 END + p.unknown AS android_pending
  FROM push.jobs j
  CROSS JOIN LATERAL (
      -- The audience counted as [all, Android], only while the job is not expanded.
      SELECT CASE WHEN j.total IS NOT NULL THEN NULL
                  WHEN j.tokens IS NOT NULL
                  -- push.token_platform's rule, inline: a view's readers need no EXECUTE on it. Every listed
                  -- token was accepted at enqueue, so one that is not APNs-shaped (or whose app has no APNs) is FCM's.
                  THEN (SELECT ARRAY[count(*), count(*) FILTER (
                                   WHERE a.fcm_project_id IS NOT NULL
                                     AND NOT (x ~ '^[0-9A-Fa-f]{64,200}$'
                                              AND (a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL)))]
                          FROM unnest(j.tokens) AS x, push.apps a WHERE a.id = j.app_id)
                  WHEN j.user_ids IS NOT NULL
                  THEN (SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android')]
                          FROM push.devices d WHERE d.app_id = j.app_id AND d.user_id = ANY (j.user_ids))
                  WHEN j.tags IS NOT NULL
                  THEN (SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android')]
                          FROM push.devices d WHERE d.app_id = j.app_id AND d.tags && j.tags)
                  ELSE (SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android')]
                          FROM push.devices d WHERE d.app_id = j.app_id) END AS audience
  ) c
  CROSS JOIN LATERAL (
      SELECT coalesce(j.total, c.audience[1]) AS total,
             CASE WHEN j.total IS NULL THEN c.audience[2] ELSE j.android_total END AS android_total
  ) t
  -- NULL for a job expanded before the per-platform counters existed, 0 otherwise: added to each
  -- per-platform figure, it blanks them all at once.
  CROSS JOIN LATERAL (SELECT CASE WHEN t.android_total IS NULL THEN NULL ELSE 0::int8 END AS unknown) p
 WHERE (SELECT push.granted_apps()) IS NULL OR j.app_id = ANY ((SELECT push.granted_apps())::text[]);
