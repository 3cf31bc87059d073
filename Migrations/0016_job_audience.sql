-- The audience of a job, and counts that add up while it changes (issue 31).
--
-- A job reaches the devices that match its audience when it is expanded, and still exist when their turn
-- comes. An explicit token list and a small user audience are read once, at expansion, into the job's chunks.
-- A broadcast (a key range per chunk) is read range by range as it is sent: a device pruned, deleted,
-- replaced or moved to the other platform before its range is read is not sent, and a device registered
-- after the expansion is not sent either (it was not in the audience). push.jobs.total follows what is sent:
-- it is the audience counted at expansion, corrected as each range is read, so that when a job ends
--     total = delivered + failed + expired        (= its rows in push.deliveries)
-- and the corrections are kept beside it, per job:
--     removed_before_send  devices counted at expansion but gone from the audience when their range was read
--     added_before_send    devices found in a range beyond what expansion counted there (a device re-registered
--                          with `replaces` into a range not yet read, a user or tag that changed to match)
--     cancelled_tokens     tokens counted in total that were never sent because the job was cancelled
-- so that the audience counted at expansion = total + removed_before_send - added_before_send + cancelled_tokens.
-- Both corrections are counted per key range (about a thousand devices): within one range, a removal and an
-- addition cancel out.

-- When a device entered push.devices, to tell the audience of a running job from devices registered since.
-- NULL for devices registered before this migration: older than any job that runs after it. No rewrite of
-- the table: the column is added without a default, which is then set for new rows only.
ALTER TABLE push.devices ADD COLUMN created_at timestamptz;
ALTER TABLE push.devices ALTER COLUMN created_at SET DEFAULT clock_timestamp();

-- When the job's audience was read (the expansion statement's start), and the corrections above.
ALTER TABLE push.jobs
    ADD COLUMN audience_at timestamptz,
    ADD COLUMN removed_before_send int8 NOT NULL DEFAULT 0,
    ADD COLUMN added_before_send int8 NOT NULL DEFAULT 0,
    ADD COLUMN cancelled_tokens int8 NOT NULL DEFAULT 0;

GRANT UPDATE (audience_at, removed_before_send, added_before_send, cancelled_tokens, android_total) ON push.jobs
   TO pgpush_worker;

-- push.register_device as in 0013, and: a device that changes platform is new on its new platform, and a
-- device registered with `replaces` keeps the replaced device's place in a running job's audience.
CREATE OR REPLACE FUNCTION push.register_device(
    app_id   text,
    token    text,
    user_id  text DEFAULT NULL,
    tags     text[] DEFAULT '{}',
    replaces text DEFAULT NULL,
    platform text DEFAULT 'ios'
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    normalized text;
    rule       text;
BEGIN
    PERFORM push.check_app_granted(register_device.app_id);
    IF NOT EXISTS (SELECT 1 FROM push.apps a WHERE a.id = register_device.app_id) THEN
        RAISE EXCEPTION 'unknown app_id: %', register_device.app_id
            USING ERRCODE = 'foreign_key_violation', COLUMN = 'app_id';
    END IF;
    IF register_device.platform IS NULL OR register_device.platform NOT IN ('ios', 'android') THEN
        RAISE EXCEPTION 'platform must be ''ios'' or ''android'''
            USING ERRCODE = 'check_violation', COLUMN = 'platform';
    END IF;
    IF register_device.platform = 'ios' THEN
        rule := 'an APNs device token is 64 to 200 hex characters';
        IF register_device.token IS NULL OR register_device.token !~ '^[0-9A-Fa-f]{64,200}$' THEN
            RAISE EXCEPTION 'token is not a valid device token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'token';
        END IF;
        IF register_device.replaces IS NOT NULL AND register_device.replaces !~ '^[0-9A-Fa-f]{64,200}$' THEN
            RAISE EXCEPTION 'replaces is not a valid device token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'replaces';
        END IF;
        normalized := lower(register_device.token);
    ELSE
        rule := 'an FCM registration token is 16 to 1024 of A-Z, a-z, 0-9, ''_'', ''-'' and '':''';
        IF register_device.token IS NULL
           OR NOT (register_device.token ~ '^[A-Za-z0-9_:-]+$' AND length(register_device.token) BETWEEN 16 AND 1024) THEN
            RAISE EXCEPTION 'token is not a valid FCM registration token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'token';
        END IF;
        IF register_device.replaces IS NOT NULL
           AND NOT (register_device.replaces ~ '^[A-Za-z0-9_:-]+$' AND length(register_device.replaces) BETWEEN 16 AND 1024) THEN
            RAISE EXCEPTION 'replaces is not a valid FCM registration token: %', rule USING ERRCODE = 'check_violation', COLUMN = 'replaces';
        END IF;
        normalized := register_device.token;
    END IF;
    IF register_device.tags IS NULL OR array_position(register_device.tags, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'tags must be a list without NULLs' USING ERRCODE = 'check_violation', COLUMN = 'tags';
    END IF;
    IF length(register_device.user_id) > 256 THEN
        RAISE EXCEPTION 'user_id is % characters long: a user id is at most 256 characters', length(register_device.user_id)
            USING ERRCODE = 'check_violation', COLUMN = 'user_id';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(register_device.tags) t WHERE length(t) > 256) THEN
        RAISE EXCEPTION 'tags holds a tag longer than 256 characters: a tag is at most 256 characters'
            USING ERRCODE = 'check_violation', COLUMN = 'tags';
    END IF;

    INSERT INTO push.devices AS d (app_id, token, user_id, tags, registered_at, platform)
    VALUES (register_device.app_id, normalized, register_device.user_id, register_device.tags, clock_timestamp(),
            register_device.platform)
    ON CONFLICT ON CONSTRAINT devices_pkey DO UPDATE
       SET user_id = EXCLUDED.user_id, tags = EXCLUDED.tags, registered_at = EXCLUDED.registered_at,
           platform = EXCLUDED.platform,
           -- A token moved to the other platform is a new device there: a running broadcast that already
           -- sent it on the old platform must not send it again on the new one.
           created_at = CASE WHEN d.platform = EXCLUDED.platform THEN d.created_at ELSE EXCLUDED.created_at END;

    IF register_device.replaces IS NOT NULL THEN
        -- The new token is the same device under a new name: it keeps the replaced device's place in the
        -- audience of a job already running (push.jobs.audience_at), instead of counting as registered now.
        WITH replaced AS (
            DELETE FROM push.devices d
             WHERE d.app_id = register_device.app_id
               AND d.token = CASE WHEN register_device.platform = 'ios' THEN lower(register_device.replaces)
                                  ELSE register_device.replaces END
               AND d.token <> normalized
            RETURNING d.created_at, d.platform
        )
        UPDATE push.devices n SET created_at = replaced.created_at
          FROM replaced
         WHERE n.app_id = register_device.app_id AND n.token = normalized AND n.platform = replaced.platform
           AND n.created_at IS NOT NULL AND (replaced.created_at IS NULL OR replaced.created_at < n.created_at);
    END IF;
END;
$$;

-- push.cancel as in 0008, and: the tokens of the chunks it drops leave the job's total (and Android's part of
-- it) for cancelled_tokens, so that total stays the sum of the job's outcomes. A range never read counts with
-- the size it had at expansion. A job cancelled before its expansion reached no device: its total is 0.
CREATE OR REPLACE FUNCTION push.cancel(job_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push AS $$
#variable_conflict use_column
DECLARE
    updated bigint;
    allowed text[] := push.granted_apps();
BEGIN
    UPDATE push.jobs j SET state = 'cancelled', finished_at = now()
     WHERE j.id = cancel.job_id AND j.state IN ('queued', 'running')
       AND (allowed IS NULL OR j.app_id = ANY (allowed))
    RETURNING j.id INTO updated;
    IF updated IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM push.jobs j WHERE j.id = cancel.job_id AND (allowed IS NULL OR j.app_id = ANY (allowed))) THEN
            RAISE EXCEPTION 'unknown job_id: %', cancel.job_id USING ERRCODE = 'no_data_found', COLUMN = 'job_id';
        END IF;
        RETURN false;
    END IF;
    WITH dropped AS (
        DELETE FROM push.chunks c WHERE c.job_id = cancel.job_id AND c.locked_by IS NULL
        RETURNING c.estimated_tokens, c.platform
    ), counted AS (
        SELECT coalesce(sum(estimated_tokens), 0)::int8 AS tokens,
               coalesce(sum(estimated_tokens) FILTER (WHERE platform = 'android'), 0)::int8 AS android
          FROM dropped
    )
    UPDATE push.jobs j
       SET total = coalesce(j.total, 0) - counted.tokens,
           -- NULL stays NULL: a job expanded before 0011 has no per-platform figures.
           android_total = CASE WHEN j.total IS NULL THEN 0 ELSE j.android_total - counted.android END,
           cancelled_tokens = j.cancelled_tokens + counted.tokens
      FROM counted
     WHERE j.id = cancel.job_id;
    PERFORM pg_notify('pgpush_cancel', cancel.job_id::text);
    RETURN true;
END;
$$;

-- The columns of 0011, then when the audience was read and the three corrections to total.
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
            THEN greatest(t.android_total - j.android_delivered - j.android_failed, 0) ELSE 0 END + p.unknown AS android_pending,
       j.audience_at,
       j.removed_before_send,
       j.added_before_send,
       j.cancelled_tokens
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
