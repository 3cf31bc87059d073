-- Statistics live in SQL: the same views serve analysts, `pgpush stats`, dashboards and KEDA.

-- One row per job. `failed` counts every final outcome that was not a delivery (expired included, also shown
-- on its own); `pruned` counts the devices the pruner deleted because of this job; `pending` is what is still
-- to be sent while the job is queued or running.
CREATE VIEW push.job_progress AS
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
       j.first_sent_at
  FROM push.jobs j
  CROSS JOIN LATERAL (
      SELECT coalesce(
          j.total,
          cardinality(j.tokens)::bigint,
          (SELECT count(*) FROM push.devices d
            WHERE d.app_id = j.app_id
              AND (j.user_ids IS NULL OR d.user_id = ANY (j.user_ids))
              AND (j.tags IS NULL OR d.tags && j.tags))
      ) AS total
  ) t;

CREATE VIEW push.delivery_stats AS
SELECT (d.sent_at AT TIME ZONE 'UTC')::date AS day,
       d.app_id,
       d.status,
       d.reason,
       count(*) AS count
  FROM push.deliveries d
 GROUP BY 1, 2, 3, 4;

-- Queue depth in tokens per app, for autoscaling (KEDA) and alerting on backlog age.
CREATE VIEW push.queue_backlog AS
SELECT p.app_id,
       sum(p.pending)::bigint AS backlog_tokens,
       min(p.created_at) AS oldest_queued_at,
       extract(epoch FROM now() - min(p.created_at))::double precision AS oldest_age_seconds
  FROM push.job_progress p
 WHERE p.state IN ('queued', 'running') AND p.send_at <= now()
 GROUP BY p.app_id;

-- Enqueue→send latency per job.
CREATE VIEW push.job_latency AS
SELECT j.id AS job_id,
       j.app_id,
       j.created_at,
       j.send_at,
       j.first_sent_at,
       j.finished_at,
       j.first_sent_at - greatest(j.created_at, j.send_at) AS enqueue_to_first_send,
       j.finished_at - greatest(j.created_at, j.send_at) AS enqueue_to_finish
  FROM push.jobs j;

-- Paused apps and why, for operators and the paused-apps alert.
CREATE VIEW push.app_status AS
SELECT a.id AS app_id, a.topic, a.environment,
       CASE WHEN a.private_key_path IS NOT NULL THEN 'token' ELSE 'certificate' END AS auth,
       a.rate_limit, a.paused_reason, a.paused_at
  FROM push.apps a;
