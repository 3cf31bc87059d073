-- Job events: what happened, for producers, without polling.
--
-- * push.job_events holds one row per event: a job started, ended (done, failed, cancelled, replaced), an app
--   paused or resumed, devices pruned. Triggers write them in the same transaction as the change, so every
--   path that changes state records it: the workers, maintenance, push.cancel, the dashboard, an operator's
--   UPDATE.
-- * `id` grows in commit order: a reader that has seen id N never later finds a new row below N. The triggers
--   collect a transaction's events in push.job_events_pending; at commit, a deferred trigger builds their
--   bodies, takes the transaction-scoped advisory lock below, then numbers and moves them into push.job_events.
--   The lock is held until the commit is visible, so the next transaction that writes events takes its ids
--   after that commit.
--   Only commits that wrote events wait for each other, for the time between numbering and the end of the
--   commit (its WAL flush); nothing waits for a transaction still running, however long it stays open.
-- * One NOTIFY pgpush_job_events per transaction that wrote events, its payload the highest new id.
-- * Tenancy: pgpush_reader, pgpush_producer, pgpush_dashboard and pgpush_webhook read the events of their
--   granted apps (all apps when they have no grant), by row level security.
-- * push.webhook_cursors keeps a relay's place in the stream; pgpush_webhook is the group role of a relay.
-- * Retention is the worker's (--retention-days), as for finished jobs.

CREATE TABLE push.job_events (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id text NOT NULL,
    -- The job of a job_* event; NULL for app_* and devices_pruned (each pruned device names its job).
    job_id bigint,
    -- When the event was numbered, at its transaction's commit: it grows with id.
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    event  text NOT NULL CONSTRAINT job_events_event_valid CHECK (event IN (
               'job_started', 'job_done', 'job_failed', 'job_cancelled', 'job_replaced',
               'app_paused', 'app_resumed', 'devices_pruned')),
    body   jsonb NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE push.job_events IS
    'One row per event, written by triggers in the transaction of the change; id grows in commit order (see migration 0025).';

-- A transaction's events until its commit numbers them. Unlogged: a row never outlives its transaction.
CREATE UNLOGGED TABLE push.job_events_pending (
    seq    bigint GENERATED ALWAYS AS IDENTITY,
    xid    xid8 NOT NULL DEFAULT pg_current_xact_id(),
    app_id text NOT NULL,
    job_id bigint,
    event  text NOT NULL,
    -- NULL for a job event: its body is read from the job at commit, after the transaction's last change to it.
    body   jsonb,
    -- The transaction's first pending row: the one whose deferred trigger moves them all.
    flush  boolean NOT NULL DEFAULT false
);
CREATE INDEX job_events_pending_by_xid ON push.job_events_pending (xid);

-- The advisory lock every transaction takes right before it takes ids of push.job_events (the bytes "pgpushev").
-- No SET clause, so that it is inlined as the constant.
CREATE FUNCTION push.job_events_lock_key() RETURNS bigint
    LANGUAGE sql IMMUTABLE
AS $$ SELECT 8099566104598832502::pg_catalog.int8 $$;

-- Whether the caller's pending row is the transaction's first, whose deferred trigger writes them all. The
-- answer is kept in a transaction-scoped setting: a savepoint rolled back undoes it with the rows it covered,
-- and the flush clears it, so events after an early flush (SET CONSTRAINTS ALL IMMEDIATE) get one of their own.
-- The caller must insert a row with `flush` set to the answer.
-- It runs for every event, so without a SET clause (each costs a save and restore of the setting per call):
-- every name in it is qualified.
CREATE FUNCTION push.job_events_first() RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    me pg_catalog.text := pg_catalog.pg_current_xact_id()::pg_catalog.text;
BEGIN
    IF pg_catalog.current_setting('pgpush.job_events_flush', true) OPERATOR(pg_catalog.=) me THEN
        RETURN false;
    END IF;
    PERFORM pg_catalog.set_config('pgpush.job_events_flush', me, true);
    RETURN true;
END;
$$;

-- The provider a pause reason is about, when its text tells: FCM's error codes and texts naming FCM or a
-- service account; APNs' reasons, its TLS refusals and texts naming APNs or its credential columns. NULL for
-- the rest (an operator's words, the safety valve, which counts both providers' answers).
CREATE FUNCTION push.pause_provider(reason text) RETURNS text
    LANGUAGE sql IMMUTABLE SET search_path = pg_catalog
AS $$
    SELECT CASE
        WHEN reason IS NULL OR reason LIKE 'BadDeviceToken safety valve%' THEN NULL
        WHEN reason ~ '^(THIRD_PARTY_AUTH_ERROR|APNS_AUTH_ERROR|PERMISSION_DENIED|NOT_FOUND|UNAUTHENTICATED|SENDER_ID_MISMATCH|QUOTA_EXCEEDED|INVALID_ARGUMENT)\M'
          OR reason ~* '(\mfcm|\mfirebase\M|service.account)' THEN 'fcm'
        WHEN reason ~ '^(Bad[A-Za-z]+|Missing[A-Za-z]+|InvalidProviderToken|ExpiredProviderToken|TopicDisallowed|Forbidden|DuplicateHeaders|UnrelatedKeyIdInToken|MethodNotAllowed|TooManyProviderTokenUpdates|TLS[A-Za-z]+)\M'
          OR reason ~* '(\mapns\M|private_key_path|certificate_path|certificate_password_env)' THEN 'apns'
    END
$$;

-- A job's state changes: job_started (queued to running, or to done or failed at once for an empty audience),
-- then job_done, job_failed or job_cancelled (job_replaced when the commit finds replaced_by set). Row-level
-- with a WHEN, so the many updates of counters alone cost nothing here; the body is read at commit.
CREATE FUNCTION push.job_state_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
DECLARE
    started boolean := OLD.state = 'queued' AND NEW.state IN ('running', 'done', 'failed');
    ended   boolean := NEW.state IN ('done', 'failed', 'cancelled');
    flushes boolean;
BEGIN
    IF NOT (started OR ended) THEN
        RETURN NULL;
    END IF;
    flushes := push.job_events_first();
    IF started THEN
        INSERT INTO push.job_events_pending (app_id, job_id, event, flush) VALUES (NEW.app_id, NEW.id, 'job_started', flushes);
        flushes := false;
    END IF;
    IF ended THEN
        INSERT INTO push.job_events_pending (app_id, job_id, event, flush) VALUES (NEW.app_id, NEW.id, 'job_' || NEW.state, flushes);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_state_events AFTER UPDATE OF state ON push.jobs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION push.job_state_events();

-- app_paused (a reason set or replaced) and app_resumed (cleared; the body names the reason it was paused for).
CREATE FUNCTION push.app_pause_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
DECLARE
    reason text := coalesce(NEW.paused_reason, OLD.paused_reason);
BEGIN
    INSERT INTO push.job_events_pending (app_id, event, body, flush)
    VALUES (NEW.id, CASE WHEN NEW.paused_reason IS NULL THEN 'app_resumed' ELSE 'app_paused' END,
            jsonb_build_object('reason', reason, 'provider', push.pause_provider(reason)), push.job_events_first());
    RETURN NULL;
END;
$$;
CREATE TRIGGER apps_pause_events AFTER UPDATE OF paused_reason ON push.apps
    FOR EACH ROW WHEN (OLD.paused_reason IS DISTINCT FROM NEW.paused_reason) EXECUTE FUNCTION push.app_pause_events();

-- devices_pruned: one event per inserting statement and app, with every device in full (producers clean their
-- own tables by token) and why it was pruned.
CREATE FUNCTION push.devices_pruned_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
DECLARE
    flushes boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pruned) THEN
        RETURN NULL;
    END IF;
    flushes := push.job_events_first();
    INSERT INTO push.job_events_pending (app_id, event, body, flush)
    SELECT g.app_id, 'devices_pruned', g.body, flushes AND g.n = 1
      FROM (SELECT p.app_id, row_number() OVER (ORDER BY p.app_id) AS n,
                   jsonb_build_object('devices', jsonb_agg(jsonb_build_object(
                       'token', p.token, 'reason', p.reason, 'job_id', p.job_id, 'user_id', p.user_id) ORDER BY p.id)) AS body
              FROM pruned p GROUP BY p.app_id) AS g
     ORDER BY g.n;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pruned_devices_events AFTER INSERT ON push.pruned_devices
    REFERENCING NEW TABLE AS pruned FOR EACH STATEMENT EXECUTE FUNCTION push.devices_pruned_events();

-- Every insert into push.job_events takes the lock before its first id, whoever runs it: ids in commit order
-- are a property of the table, not of one code path.
CREATE FUNCTION push.job_events_serialize() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(push.job_events_lock_key());
    RETURN NULL;
END;
$$;
CREATE TRIGGER job_events_serialize BEFORE INSERT ON push.job_events
    FOR EACH STATEMENT EXECUTE FUNCTION push.job_events_serialize();

-- At commit (deferred): the transaction's events in the order they happened, a job's body read from its row
-- as the transaction leaves it (counts, failure_reason, replaced_by); then the lock, the time and the ids, and
-- one NOTIFY. The bodies are built before the lock: only the insert waits for, and holds up, other commits.
CREATE FUNCTION push.flush_job_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, push
AS $$
DECLARE
    me     xid8 := pg_current_xact_id();
    apps   text[];
    jobs   bigint[];
    events text[];
    bodies jsonb[];
    stamp  timestamptz;
    newest bigint;
BEGIN
    PERFORM set_config('pgpush.job_events_flush', '', true);
    WITH moved AS (
        DELETE FROM push.job_events_pending p WHERE p.xid = me
        RETURNING p.seq, p.app_id, p.job_id, p.event, p.body
    )
    SELECT array_agg(m.app_id ORDER BY m.seq), array_agg(m.job_id ORDER BY m.seq),
           array_agg(CASE WHEN m.event = 'job_cancelled' AND j.replaced_by IS NOT NULL THEN 'job_replaced' ELSE m.event END
                     ORDER BY m.seq),
           array_agg(CASE WHEN m.body IS NOT NULL THEN m.body
                          WHEN j.id IS NULL THEN '{}'::jsonb
                          ELSE jsonb_build_object(
                                   'state', j.state, 'total', j.total, 'delivered', j.delivered, 'failed', j.failed,
                                   'expired', j.expired, 'pruned', j.pruned, 'cancelled_tokens', j.cancelled_tokens,
                                   'removed_before_send', j.removed_before_send, 'added_before_send', j.added_before_send,
                                   'answered', j.answered, 'bad_device_tokens', j.bad_device_tokens,
                                   'android_total', j.android_total, 'android_delivered', j.android_delivered,
                                   'android_failed', j.android_failed)
                               || CASE WHEN j.failure_reason IS NOT NULL
                                       THEN jsonb_build_object('failure_reason', j.failure_reason) ELSE '{}' END
                               || CASE WHEN m.event = 'job_cancelled' AND j.replaced_by IS NOT NULL
                                       THEN jsonb_build_object('replaced_by', j.replaced_by) ELSE '{}' END
                               || CASE WHEN j.idempotency_key IS NOT NULL
                                       THEN jsonb_build_object('idempotency_key', j.idempotency_key) ELSE '{}' END
                     END ORDER BY m.seq)
      INTO apps, jobs, events, bodies
      FROM moved m
      LEFT JOIN push.jobs j ON j.id = m.job_id;
    IF apps IS NULL THEN
        RETURN NULL;
    END IF;
    -- The lock first, then the time and the ids: the next writer takes both after this commit is visible.
    PERFORM pg_advisory_xact_lock(push.job_events_lock_key());
    stamp := clock_timestamp();
    WITH written AS (
        INSERT INTO push.job_events (app_id, job_id, at, event, body)
        SELECT e.app_id, e.job_id, stamp, e.event, e.body
          FROM unnest(apps, jobs, events, bodies) WITH ORDINALITY AS e(app_id, job_id, event, body, n)
         ORDER BY e.n
        RETURNING id
    )
    SELECT max(id) INTO newest FROM written;
    PERFORM pg_notify('pgpush_job_events', newest::text);
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER job_events_flush AFTER INSERT ON push.job_events_pending
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.flush) EXECUTE FUNCTION push.flush_job_events();

-- A relay's place in the stream: the last event it delivered.
CREATE TABLE push.webhook_cursors (
    name          text PRIMARY KEY,
    last_event_id bigint NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The group of a webhook relay's login: CREATE ROLE relay LOGIN PASSWORD '…' IN ROLE pgpush_webhook. Roles
-- are cluster-wide, so creating it tolerates another database's migration having done it first (that one
-- has committed when CREATE ROLE fails here, so the grants below find the role).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgpush_webhook') THEN
        BEGIN
            CREATE ROLE pgpush_webhook NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END;
$$;

-- Tenancy as on push.channels: a login granted some apps reads only their events. Retention is the worker's.
ALTER TABLE push.job_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_events_granted ON push.job_events FOR SELECT
    TO pgpush_producer, pgpush_reader, pgpush_dashboard, pgpush_webhook
    USING ((SELECT push.granted_apps()) IS NULL OR app_id = ANY ((SELECT push.granted_apps())::text[]));
CREATE POLICY job_events_worker ON push.job_events FOR ALL TO pgpush_worker USING (true);

REVOKE ALL ON push.job_events, push.job_events_pending, push.webhook_cursors FROM PUBLIC;
REVOKE ALL ON FUNCTION push.job_events_lock_key(), push.job_events_first(), push.pause_provider(text),
                       push.job_state_events(), push.app_pause_events(), push.devices_pruned_events(),
                       push.job_events_serialize(), push.flush_job_events() FROM PUBLIC;
GRANT SELECT ON push.job_events TO pgpush_producer, pgpush_reader, pgpush_dashboard, pgpush_webhook;
GRANT SELECT, DELETE ON push.job_events TO pgpush_worker;
GRANT USAGE ON SCHEMA push TO pgpush_webhook;
GRANT EXECUTE ON FUNCTION push.granted_apps() TO pgpush_webhook;
GRANT SELECT, INSERT, UPDATE ON push.webhook_cursors TO pgpush_webhook;
