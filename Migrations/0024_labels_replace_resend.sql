-- Labels on jobs, replacing a pending job, and resending a job's failures.
--
-- * push.enqueue(..., labels => '{"campaign": "black-friday"}'): a flat JSON object of strings kept on the job
--   (push.jobs.labels, NULL when none), checked at enqueue, exposed by push.job_progress, push.job_latency and
--   push.job_engagement, and indexed for `labels @> '{"campaign": "x"}'`.
-- * push.enqueue(..., replace_key => 'chat-42'): a job of the same app and key none of whose tokens has been
--   sent yet is cancelled as push.cancel cancels it, in the enqueue's transaction, with replaced_by naming the
--   new job. A job that has sent anything is left alone. Serialised per (app, key), so concurrent producers
--   leave exactly one pending job.
-- * push.resend_failed(job_id, reasons): a new job, the same message, to the tokens of a job whose outcome was
--   a failure worth retrying (or one of `reasons`), never one delivered or pruned; resent_from names the job.
--
-- Jobs without labels or a replace_key pay nothing: their checks are a trigger of their own whose WHEN they do
-- not meet, and push.validate_job (and its fast path) is unchanged.

ALTER TABLE push.jobs
    ADD COLUMN labels      jsonb,
    ADD COLUMN replace_key text,
    -- The job that replaced this one (state 'cancelled'). No foreign key: retention removes jobs one by one.
    ADD COLUMN replaced_by bigint,
    -- The job this one resends the failures of (push.resend_failed).
    ADD COLUMN resent_from bigint;

-- `labels @> '{"campaign": "black-friday"}'` (jsonb_path_ops serves @> only, and is the smaller index).
CREATE INDEX jobs_labels ON push.jobs USING gin (labels jsonb_path_ops) WHERE labels IS NOT NULL;
-- The pending jobs of a replace key. `state` is already in other indexes' predicates, so this one takes no
-- update off the HOT path.
CREATE INDEX jobs_pending_replace_key ON push.jobs (app_id, replace_key)
    WHERE replace_key IS NOT NULL AND state IN ('queued', 'running');
-- The resends of a job, so a token is not resent twice.
CREATE INDEX jobs_resent_from ON push.jobs (resent_from) WHERE resent_from IS NOT NULL;

-- Checks labels and replace_key (it runs for jobs with either only; see the trigger's WHEN). Labels are a flat
-- object of at most 32 strings, keys of 1 to 64 characters and values of at most 256: names for reports, not
-- a second payload. An empty object is no labels.
CREATE FUNCTION push.validate_job_labels() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, push
AS $$
DECLARE
    key    text;
    value  jsonb;
    keys   integer;
BEGIN
    IF NEW.labels IS NOT NULL THEN
        IF jsonb_typeof(NEW.labels) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'labels must be a JSON object of strings, such as {"campaign": "black-friday", "team": "growth"}, not %',
                CASE jsonb_typeof(NEW.labels) WHEN 'array' THEN 'an array' WHEN 'null' THEN 'null' ELSE 'a ' || jsonb_typeof(NEW.labels) END
                USING ERRCODE = 'check_violation', COLUMN = 'labels';
        END IF;
        SELECT count(*) INTO keys FROM jsonb_object_keys(NEW.labels);
        IF keys = 0 THEN
            NEW.labels := NULL;
        ELSIF keys > 32 THEN
            RAISE EXCEPTION 'labels has % keys: a job has at most 32 labels', keys
                USING ERRCODE = 'check_violation', COLUMN = 'labels';
        END IF;
        FOR key, value IN SELECT e.key, e.value FROM jsonb_each(NEW.labels) AS e ORDER BY e.key LOOP
            IF key = '' THEN
                RAISE EXCEPTION 'labels has an empty key: a label''s name is 1 to 64 characters'
                    USING ERRCODE = 'check_violation', COLUMN = 'labels';
            END IF;
            IF length(key) > 64 THEN
                RAISE EXCEPTION 'labels key "%…" is % characters: a label''s name is at most 64 characters', left(key, 40), length(key)
                    USING ERRCODE = 'check_violation', COLUMN = 'labels';
            END IF;
            IF jsonb_typeof(value) <> 'string' THEN
                RAISE EXCEPTION 'labels."%" must be a string, not %', key,
                    CASE jsonb_typeof(value) WHEN 'array' THEN 'an array' WHEN 'object' THEN 'an object' WHEN 'null' THEN 'null'
                         ELSE 'a ' || jsonb_typeof(value) END
                    USING ERRCODE = 'check_violation', COLUMN = 'labels';
            END IF;
            IF length(value #>> '{}') > 256 THEN
                RAISE EXCEPTION 'labels."%" is % characters: a label''s value is at most 256 characters', key, length(value #>> '{}')
                    USING ERRCODE = 'check_violation', COLUMN = 'labels';
            END IF;
        END LOOP;
    END IF;
    IF NEW.replace_key IS NOT NULL THEN
        IF NEW.replace_key = '' THEN
            RAISE EXCEPTION 'replace_key is empty: give a key such as ''chat-42'', or leave it out'
                USING ERRCODE = 'check_violation', COLUMN = 'replace_key';
        END IF;
        IF octet_length(NEW.replace_key) > 255 THEN
            RAISE EXCEPTION 'replace_key is % bytes, over the 255-byte limit', octet_length(NEW.replace_key)
                USING ERRCODE = 'check_violation', COLUMN = 'replace_key';
        END IF;
    END IF;
    -- Only push.enqueue's replacement sets it, on the job it replaces.
    NEW.replaced_by := NULL;
    RETURN NEW;
END;
$$;

-- After jobs_validate and jobs_validate_content (row triggers fire in name order): the job is valid, and
-- a restricted login has been refused another app's job before its labels are looked at.
CREATE TRIGGER jobs_validate_labels BEFORE INSERT ON push.jobs FOR EACH ROW
    WHEN (NEW.labels IS NOT NULL OR NEW.replace_key IS NOT NULL OR NEW.replaced_by IS NOT NULL)
    EXECUTE FUNCTION push.validate_job_labels();

-- A job inserted with a replace_key replaces the pending jobs of its app and key: each one none of whose tokens
-- has been sent (queued, or running with no first send and no outcome) is cancelled by push.cancel, so its
-- unclaimed chunks are dropped and counted in cancelled_tokens and a worker holding one stops, and names the
-- new job in replaced_by. A job that has sent any token is left to finish beside the new one.
--
-- An AFTER trigger, so a row that is not inserted (an idempotent retry: ON CONFLICT DO NOTHING) replaces
-- nothing. The enqueues of one (app, key) are serialised by a transaction-scoped advisory lock: the holder's
-- next statement has a fresh snapshot (READ COMMITTED), so it sees every job of that key committed before it
-- got the lock, and its own is seen by the next holder. Of several jobs with one key in one INSERT, the last
-- replaces the others.
CREATE FUNCTION push.replace_pending_jobs() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
DECLARE
    own_xmin xid;
    pending  bigint;
BEGIN
    IF current_setting('transaction_isolation') = 'repeatable read' THEN
        -- Its snapshot would hide a job of the key committed after the transaction began: two pending jobs.
        -- SERIALIZABLE is safe (one of two such transactions fails with a serialization error, to be retried).
        RAISE EXCEPTION 'replace_key needs READ COMMITTED or SERIALIZABLE: in a REPEATABLE READ transaction a job enqueued with the same key by another producer since it began is not seen, and would not be replaced'
            USING ERRCODE = 'feature_not_supported', COLUMN = 'replace_key';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('pgpush-replace-key:' || NEW.app_id || ':' || NEW.replace_key, 0));
    -- The rows of this same statement after this one replace it in their turn; they share its xmin.
    SELECT j.xmin INTO own_xmin FROM push.jobs j WHERE j.id = NEW.id;
    FOR pending IN
        SELECT j.id FROM push.jobs j
         WHERE j.app_id = NEW.app_id AND j.replace_key = NEW.replace_key AND j.state IN ('queued', 'running')
           AND j.id <> NEW.id AND NOT (j.id > NEW.id AND j.xmin = own_xmin)
           AND j.first_sent_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM push.deliveries d WHERE d.job_id = j.id)
         ORDER BY j.id
           FOR UPDATE OF j
    LOOP
        -- Locked, and checked again on its latest version: a worker that records a first send waits for this
        -- transaction, or has already made the row not match.
        IF push.cancel(pending) THEN
            UPDATE push.jobs j SET replaced_by = NEW.id WHERE j.id = pending;
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_replace_pending AFTER INSERT ON push.jobs FOR EACH ROW
    WHEN (NEW.replace_key IS NOT NULL)
    EXECUTE FUNCTION push.replace_pending_jobs();

DROP FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text,
                           integer, jsonb, text[], text, text, jsonb, text);

CREATE FUNCTION push.enqueue(app_id text, payload jsonb DEFAULT NULL::jsonb, push_type text DEFAULT NULL::text, apns_priority integer DEFAULT NULL::integer, tokens text[] DEFAULT NULL::text[], user_ids text[] DEFAULT NULL::text[], tags text[] DEFAULT NULL::text[], send_at timestamp with time zone DEFAULT now(), expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, collapse_id text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, priority integer DEFAULT 0, fcm jsonb DEFAULT NULL::jsonb, activity_ids text[] DEFAULT NULL::text[], activity_type text DEFAULT NULL::text, channel text DEFAULT NULL::text, localized jsonb DEFAULT NULL::jsonb, badge text DEFAULT NULL::text, labels jsonb DEFAULT NULL::jsonb, replace_key text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'push'
AS $function$
#variable_conflict use_column
DECLARE
    job_id bigint;
BEGIN
    IF enqueue.apns_priority IS NOT NULL AND enqueue.apns_priority NOT IN (10, 5, 1) THEN
        RAISE EXCEPTION 'apns_priority % is not valid: APNs accepts 10, 5 or 1', enqueue.apns_priority
            USING ERRCODE = 'check_violation', COLUMN = 'apns_priority';
    END IF;
    IF enqueue.idempotency_key IS NULL THEN
        INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                    expires_at, collapse_id, idempotency_key, priority, fcm, activity_ids, activity_type,
                                    channel, localized, badge, labels, replace_key)
        VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
                enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
                enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
                enqueue.channel, enqueue.localized, enqueue.badge, enqueue.labels, enqueue.replace_key)
        RETURNING j.id INTO job_id;
        RETURN job_id;
    END IF;

    -- An idempotent retry inserts nothing, so it replaces nothing (jobs_replace_pending fires on an insert).
    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, user_ids, tags, send_at,
                                expires_at, collapse_id, idempotency_key, priority, fcm, activity_ids, activity_type,
                                channel, localized, badge, labels, replace_key)
    VALUES (enqueue.app_id, enqueue.payload, enqueue.push_type, enqueue.apns_priority, enqueue.tokens,
            enqueue.user_ids, enqueue.tags, enqueue.send_at, enqueue.expires_at, enqueue.collapse_id,
            enqueue.idempotency_key, enqueue.priority, enqueue.fcm, enqueue.activity_ids, enqueue.activity_type,
            enqueue.channel, enqueue.localized, enqueue.badge, enqueue.labels, enqueue.replace_key)
    ON CONFLICT (app_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO job_id;

    IF job_id IS NULL THEN
        -- The key was used before (or by a concurrent producer that has now committed): same broadcast.
        SELECT j.id INTO job_id FROM push.jobs j
         WHERE j.app_id = enqueue.app_id AND j.idempotency_key = enqueue.idempotency_key;
    END IF;
    RETURN job_id;
END;
$function$;

-- A new job with the message of job_id (app, payload, push type, priorities, collapse id, expiry, Android
-- message, locale variants, badge mode and labels) to its tokens whose outcome was a failure worth retrying:
-- a 5xx or 429 answer, or none at all (status 0: the connection failed, the chunk was poisoned, the job failed),
-- except tokens not sent because the job expired ('Expired') or was frequency capped ('FrequencyCapped');
-- or whose reason is one of `reasons`. Never a token delivered to, pruned because of this job, no longer a
-- device of the app, or already in a resend of this job that was not cancelled (resend the resend to retry its
-- own failures). Returns the new job's id, or NULL when no token qualifies. Tenancy applies as to push.cancel.
CREATE FUNCTION push.resend_failed(job_id bigint, reasons text[] DEFAULT NULL) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
#variable_conflict use_column
DECLARE
    allowed  text[] := push.granted_apps();
    original push.jobs%ROWTYPE;
    targets  text[];
    resent   bigint;
BEGIN
    IF resend_failed.job_id IS NULL THEN
        RAISE EXCEPTION 'job_id is required' USING ERRCODE = 'not_null_violation', COLUMN = 'job_id';
    END IF;
    SELECT * INTO original FROM push.jobs j
     WHERE j.id = resend_failed.job_id AND (allowed IS NULL OR j.app_id = ANY (allowed));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown job_id: %', resend_failed.job_id USING ERRCODE = 'no_data_found', COLUMN = 'job_id';
    END IF;
    PERFORM push.check_app_granted(original.app_id);
    IF original.channel IS NOT NULL THEN
        RAISE EXCEPTION 'job % is a broadcast on channel %: it has no device tokens to resend; enqueue it again',
            original.id, quote_literal(original.channel)
            USING ERRCODE = 'check_violation', COLUMN = 'job_id';
    END IF;
    IF original.expires_at IS NOT NULL AND original.expires_at <= now() THEN
        RAISE EXCEPTION 'job % expired at %: its message is no longer to be sent; enqueue a new job instead',
            original.id, original.expires_at
            USING ERRCODE = 'check_violation', COLUMN = 'job_id';
    END IF;
    -- Two resends of one job at once would both find the same tokens.
    PERFORM pg_advisory_xact_lock(hashtextextended('pgpush-resend:' || original.id, 0));

    SELECT array_agg(o.token ORDER BY o.token) INTO targets
      FROM (SELECT d.token,
                   bool_or(d.status = 200) AS delivered,
                   bool_or(d.status >= 500 OR d.status = 429
                           OR (d.status = 0 AND coalesce(d.reason, '') NOT IN ('Expired', 'FrequencyCapped'))
                           OR d.reason = ANY (resend_failed.reasons)) AS retry
              FROM push.deliveries d
             WHERE d.job_id = original.id
             GROUP BY d.token) AS o
     WHERE o.retry AND NOT o.delivered
       AND EXISTS (SELECT 1 FROM push.devices v WHERE v.app_id = original.app_id AND v.token = o.token)
       AND NOT EXISTS (SELECT 1 FROM push.pruned_devices p
                        WHERE p.app_id = original.app_id AND p.pruned_at >= original.created_at
                          AND p.job_id = original.id AND p.token = o.token)
       AND NOT EXISTS (SELECT 1 FROM push.jobs r
                        WHERE r.resent_from = original.id AND r.state <> 'cancelled' AND o.token = ANY (r.tokens));
    IF targets IS NULL THEN
        RETURN NULL;
    END IF;

    -- Checked like any job (push.validate_job and the content and labels triggers), as the caller.
    INSERT INTO push.jobs AS j (app_id, payload, push_type, apns_priority, tokens, expires_at, collapse_id, priority,
                                fcm, activity_type, localized, badge, labels, resent_from)
    VALUES (original.app_id, original.payload, original.push_type, original.apns_priority, targets, original.expires_at,
            original.collapse_id, original.priority, original.fcm, original.activity_type, original.localized,
            original.badge, original.labels, original.id)
    RETURNING j.id INTO resent;
    RETURN resent;
END;
$$;

-- The views end with the new columns; every existing column keeps its place. push.job_latency keeps its
-- security barrier (CREATE OR REPLACE VIEW replaces a view's options with the ones it gives).
CREATE OR REPLACE VIEW push.job_progress AS
 SELECT j.id AS job_id,
    j.app_id,
    j.state,
    t.total,
    j.delivered,
    j.failed + j.expired AS failed,
    j.pruned,
        CASE
            WHEN j.state = ANY (ARRAY['queued'::text, 'running'::text]) THEN GREATEST(t.total - j.delivered - j.failed - j.expired, 0::bigint)
            ELSE 0::bigint
        END AS pending,
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
        CASE
            WHEN j.state = ANY (ARRAY['queued'::text, 'running'::text]) THEN GREATEST(t.total - t.android_total - (j.delivered - j.android_delivered) - (j.failed + j.expired - j.android_failed), 0::bigint)
            ELSE 0::bigint
        END + p.unknown AS ios_pending,
    t.android_total,
    j.android_delivered + p.unknown AS android_delivered,
    j.android_failed + p.unknown AS android_failed,
        CASE
            WHEN j.state = ANY (ARRAY['queued'::text, 'running'::text]) THEN GREATEST(t.android_total - j.android_delivered - j.android_failed, 0::bigint)
            ELSE 0::bigint
        END + p.unknown AS android_pending,
    j.audience_at,
    j.removed_before_send,
    j.added_before_send,
    j.cancelled_tokens,
    j.channel,
    j.labels,
    j.replace_key,
    j.replaced_by,
    j.resent_from
   FROM push.jobs j
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN j.total IS NOT NULL THEN NULL::bigint[]
                    WHEN j.channel IS NOT NULL THEN ARRAY[1::bigint, 0::bigint]
                    WHEN j.activity_ids IS NOT NULL THEN ( SELECT ARRAY[count(*), 0::bigint] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND d.token_kind = 'activity'::text AND (d.activity_id = ANY (j.activity_ids)))
                    WHEN j.tokens IS NOT NULL THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE a.fcm_project_id IS NOT NULL AND NOT (x.x ~ '^[0-9A-Fa-f]{64,200}$'::text AND (a.private_key_path IS NOT NULL OR a.certificate_path IS NOT NULL)))] AS "array"
                       FROM unnest(j.tokens) x(x),
                        push.apps a
                      WHERE a.id = j.app_id)
                    WHEN j.user_ids IS NOT NULL THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android'::text)] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND (d.user_id = ANY (j.user_ids)) AND d.token_kind = j.audience_kind AND (j.activity_type IS NULL OR d.activity_type = j.activity_type))
                    WHEN j.tags IS NOT NULL THEN ( SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android'::text)] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND d.tags && j.tags AND d.token_kind = j.audience_kind AND (j.activity_type IS NULL OR d.activity_type = j.activity_type))
                    ELSE ( SELECT ARRAY[count(*), count(*) FILTER (WHERE d.platform = 'android'::text)] AS "array"
                       FROM push.devices d
                      WHERE d.app_id = j.app_id AND d.token_kind = j.audience_kind AND (j.activity_type IS NULL OR d.activity_type = j.activity_type))
                END AS audience) c
     CROSS JOIN LATERAL ( SELECT COALESCE(j.total, c.audience[1]) AS total,
                CASE
                    WHEN j.total IS NULL THEN c.audience[2]
                    ELSE j.android_total
                END AS android_total) t
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN t.android_total IS NULL THEN NULL::bigint
                    ELSE 0::bigint
                END AS unknown) p
  WHERE (( SELECT push.granted_apps() AS granted_apps)) IS NULL OR (j.app_id = ANY ((( SELECT push.granted_apps() AS granted_apps))::text[]));

CREATE OR REPLACE VIEW push.job_latency WITH (security_barrier = true) AS
 SELECT j.id AS job_id,
    j.app_id,
    j.created_at,
    j.send_at,
    j.first_sent_at,
    j.finished_at,
    j.first_sent_at - GREATEST(j.created_at, j.send_at) AS enqueue_to_first_send,
    j.finished_at - GREATEST(j.created_at, j.send_at) AS enqueue_to_finish,
    j.labels
   FROM push.jobs j
  WHERE (( SELECT push.granted_apps() AS granted_apps)) IS NULL OR (j.app_id = ANY ((( SELECT push.granted_apps() AS granted_apps))::text[]));

CREATE OR REPLACE VIEW push.job_engagement AS
 SELECT j.id AS job_id,
    j.app_id,
    p.platform,
    p.delivered,
    coalesce(o.opened, 0) AS opened,
    CASE WHEN p.delivered > 0 THEN round(coalesce(o.opened, 0)::numeric / p.delivered, 4) END AS open_rate,
    j.created_at,
    j.state,
    j.labels
   FROM push.jobs j
   CROSS JOIN LATERAL (VALUES ('ios'::text, (j.delivered - j.android_delivered)::bigint),
                              ('android'::text, j.android_delivered::bigint)) AS p(platform, delivered)
   LEFT JOIN LATERAL (SELECT count(*) AS opened FROM push.opens op
                       WHERE op.job_id = j.id AND op.platform = p.platform) AS o ON true
  WHERE (p.delivered > 0 OR o.opened > 0)
    AND ((SELECT push.granted_apps()) IS NULL OR j.app_id = ANY ((SELECT push.granted_apps())::text[]));

REVOKE ALL ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text,
                                    integer, jsonb, text[], text, text, jsonb, text, jsonb, text),
                       push.resend_failed(bigint, text[]), push.validate_job_labels(), push.replace_pending_jobs()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION push.enqueue(text, jsonb, text, integer, text[], text[], text[], timestamptz, timestamptz, text, text,
                                       integer, jsonb, text[], text, text, jsonb, text, jsonb, text),
                          push.resend_failed(bigint, text[])
    TO pgpush_producer;
-- replaced_by and resent_from are written by the database only.
GRANT INSERT (labels, replace_key) ON push.jobs TO pgpush_producer;
